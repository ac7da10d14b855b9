"""The wgmma kernels' forms (``runtime/cuda/fused_wgmma.py``) against the level ladder and the
kernel source, on any machine: each form (and each variant) is its level's (pairs, slices), each
names an entry point of ``fused_wgmma.cu`` built for that level's slices and classes, its
k-block and its schedule, its ring is the most stages that fit shared memory, and (where NVRTC
is installed) the default build holds the levels' kernels, the variants' build every kernel.
The kernels' bits: the GPU tests of test_fused_wgmma.py."""

from __future__ import annotations

import re

import numpy as np
import pytest

from mixpert.runtime import LADDER, get_level
from mixpert.runtime.cuda import fused_wgmma, hopper
from mixpert.runtime.packer import pair_exponent

SMEM_LIMIT = 227 * 1024  # Hopper's dynamic shared memory a block
ENTRY = re.compile(r"^FUSED_WGMMA_KERNEL\((\w+), (\d+), (\d+), (\d+), (\w+)\)", re.MULTILINE)
SCHEDULES = {"COOPERATIVE": fused_wgmma.COOPERATIVE, "PINGPONG": fused_wgmma.PINGPONG}
# the rings the kernels were measured with (levels) or are built to try (variants), in stages
RINGS = {"I": 4, "T6": 3, "IV": 3, "V": 4, "V_k128": 2, "T6_pingpong": 4, "IV_pingpong": 4,
         "V_pingpong": 6}  # fmt: skip
K_BLOCKS = {"I": 128, "T6": 128, "IV": 128, "V": 64}  # (V's 128-byte ring held 2 stages)
KERNELS = {**fused_wgmma.FORMS, **fused_wgmma.VARIANTS}


def entries() -> dict[str, tuple[int, int, int, int]]:
    """The kernel source's entry points: name -> (slices, classes, k-block bytes, tile rows)."""
    text = (hopper.KERNELS / fused_wgmma.SOURCE).read_text()
    return {
        name: (int(s), int(g), int(bk), SCHEDULES[schedule])
        for name, s, g, bk, schedule in ENTRY.findall(text)
    }


def ring_fits(form: fused_wgmma.Form) -> None:
    """The form's ring is the most stages (with their two mbarriers, beside ping-pong's two turn
    barriers, the consumers' 2 KB of tile exponents and 1 KB of alignment) that fit in shared
    memory: as the kernel sizes it, and at least 2."""
    stage = form.slices * (form.tile_m + fused_wgmma.BLOCK_N) * form.k_block
    turns = 16 if form.tile_m == fused_wgmma.PINGPONG else 0
    assert form.stage_bytes == stage
    assert form.smem == form.stages * (stage + 16) + turns + 2048 + 1024
    assert form.smem <= SMEM_LIMIT < form.smem + stage + 16  # the most stages that fit
    assert form.stages >= 2  # (a ring of one stage would leave the tensor cores waiting on loads)


@pytest.mark.parametrize("name", sorted(fused_wgmma.FORMS))
def test_each_form_is_its_levels_and_an_entry_of_the_kernel_source(name) -> None:
    level, form = get_level(name), fused_wgmma.FORMS[name]
    assert fused_wgmma.form(level) == form
    classes = max(i + j for i, j in form.pairs) + 1
    assert form.k_block == K_BLOCKS[name]
    assert entries()[form.kernel] == (form.slices, classes, form.k_block, fused_wgmma.COOPERATIVE)
    ring_fits(form)
    assert form.stages == RINGS[name]


@pytest.mark.parametrize("name", sorted(fused_wgmma.VARIANTS))
def test_each_variant_is_a_levels_pairs_on_its_own_k_block_or_schedule(name) -> None:
    variant = fused_wgmma.VARIANTS[name]
    level = get_level(fused_wgmma.level_of(variant))
    assert fused_wgmma.computes(variant, level) and fused_wgmma.form(level) != variant
    assert variant.kernel not in {form.kernel for form in fused_wgmma.FORMS.values()}
    assert variant.k_block in fused_wgmma.K_BLOCKS and variant.k_block in hopper.SWIZZLES
    classes = max(i + j for i, j in variant.pairs) + 1
    assert entries()[variant.kernel] == (variant.slices, classes, variant.k_block, variant.tile_m)
    ring_fits(variant)
    assert variant.stages == RINGS[name]


def test_v_k128_is_level_v_on_128_byte_k_blocks_with_half_its_stages() -> None:
    v, v128 = fused_wgmma.FORMS["V"], fused_wgmma.VARIANTS["V_k128"]
    assert (v128.pairs, v128.slices, v.k_block, v128.k_block) == (v.pairs, v.slices, 64, 128)
    assert fused_wgmma.level_of(v128) == "V"
    assert (v.stages, v128.stages) == (4, 2)  # ... the same bytes in flight
    assert v.stages * v.stage_bytes == v128.stages * v128.stage_bytes == 192 * 1024


def test_levels_of_other_forms_have_no_kernel() -> None:
    others = [level for level in LADDER if level.name not in fused_wgmma.FORMS]
    assert others and all(fused_wgmma.form(level) is None for level in others)
    assert set(fused_wgmma.ROUTED) <= set(fused_wgmma.FORMS)
    assert set(entries()) == {form.kernel for form in KERNELS.values()}
    assert not set(fused_wgmma.VARIANTS) & set(fused_wgmma.FORMS)
    assert not set(fused_wgmma.ROUTED) & set(fused_wgmma.VARIANTS)  # (variants are not routed)


def test_routed_levels_leave_to_the_class_sums_the_outputs_both_of_whose_sides_reach_theirs():
    for name, side in fused_wgmma.ROUTED.items():
        level = get_level(name)
        if side is None:
            assert not fused_wgmma.pipeline_wins(level, 2**20, 2**20)
            continue
        assert fused_wgmma.pipeline_wins(level, side, side)
        assert not fused_wgmma.pipeline_wins(level, side - 1, 2**20)
        assert not fused_wgmma.pipeline_wins(level, 2**20, side - 1)


def test_the_module_holds_the_levels_kernels_and_the_variant_build_the_variants_too() -> None:
    """The build every process makes at first use holds the levels' kernels alone (each
    variant would lengthen it); the variants' build holds them all."""
    pytest.importorskip("cuda.bindings.nvrtc", reason="needs NVRTC (cuda-bindings)")
    try:
        image = hopper.cubin(fused_wgmma.SOURCE)
    except Exception as error:  # no NVRTC library, or one older than sm_90a; not a build error
        if str(error).startswith(f"NVRTC failed on {fused_wgmma.SOURCE}"):
            raise
        pytest.skip(f"NVRTC cannot build sm_90a here: {error}")
    with_variants = hopper.cubin(fused_wgmma.SOURCE, fused_wgmma.VARIANT_BUILD)
    for form in fused_wgmma.FORMS.values():
        assert form.defines == ()
        assert form.kernel.encode() + b"\0" in image
        assert form.kernel.encode() + b"\0" in with_variants
    for variant in fused_wgmma.VARIANTS.values():
        assert variant.defines == fused_wgmma.VARIANT_BUILD
        assert variant.kernel.encode() + b"\0" not in image
        assert variant.kernel.encode() + b"\0" in with_variants


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_the_tensor_maps_follow_the_k_block(name, monkeypatch) -> None:
    """A kernel's maps: boxes of its k-block (one row of the swizzle of that width) x 1 slot x
    the tile's lines, over {k_pad, slots, lines}: reads past k_pad are zeros, whatever k_block."""
    form, calls = KERNELS[name], []
    monkeypatch.setattr(hopper, "int8_tensor_map", lambda *a, **kw: calls.append((a, kw)))
    fused_wgmma._tensor_map.cache_clear()
    k_pad, lines = 1008, 300
    fused_wgmma._tensor_map(4096, k_pad, form.slices, lines, form.tile_m, form.k_block)
    fused_wgmma._tensor_map.cache_clear()
    ((args, kwargs),) = calls
    assert args == (4096, (k_pad, form.slices, lines), (k_pad, form.slices * k_pad),
                    (form.k_block, 1, form.tile_m))  # fmt: skip
    assert kwargs == {"swizzle": form.k_block}


def test_tensor_maps_take_the_128_and_64_byte_swizzles_with_boxes_that_fit() -> None:
    """Refused before the driver is asked (no cuda-bindings needed)."""
    for swizzle, box in ((32, 32), (64, 128), (256, 128)):
        with pytest.raises(ValueError, match=f"swizzle {swizzle} with a box of {box} bytes"):
            hopper.int8_tensor_map(0, (1024, 4, 128), (1024, 4096), (box, 1, 128), swizzle)


def test_a_ping_pong_variant_is_its_levels_kernel_on_64_row_tiles_two_to_a_block() -> None:
    """Ping-pong: the level's pairs, slices and k-block on 64-row tiles, each of the two
    consumers on its own, so a block is launched for each pair of tiles."""
    for name in ("T6", "IV", "V"):
        own, pp = fused_wgmma.FORMS[name], fused_wgmma.VARIANTS[f"{name}_pingpong"]
        assert (pp.pairs, pp.slices, pp.k_block) == (own.pairs, own.slices, own.k_block)
        assert (own.tile_m, pp.tile_m) == (128, 64)
        assert own.tiles(3, 129, 65) == 3 * 2 * 2 and pp.tiles(3, 129, 65) == 3 * 3 * 2
        assert own.blocks_wanted(12) == 12 and pp.blocks_wanted(18) == pp.blocks_wanted(17) == 9


@pytest.mark.parametrize("name", sorted(fused_wgmma.FORMS))
def test_one_int64_total_of_the_class_sums_is_combines_float64_sum(name) -> None:
    """The kernels' epilogue (``combined``) converts sum_g S_g 2^(step (G - 1 - g)), an int64,
    once, where combine adds S_g 2^-(w0 + step g) in float64 from the smallest weight up: the
    same value where every partial sum but the last is exact, which the packer's class step
    gives (the kernel traps otherwise). Checked on class sums at INT32's ends and at random."""
    w0 = pair_exponent(0)
    step = pair_exponent(1) - w0
    classes = max(i + j for i, j in fused_wgmma.FORMS[name].pairs) + 1
    assert step * (classes - 2) <= 21 and step * (classes - 1) <= 30  # the kernel's checks
    rng = np.random.default_rng(classes)
    ends = [-(2**31), 2**31 - 1, 0, 1, -1]
    cases = [list(rng.choice(ends, classes)) for _ in range(200)]
    cases += [list(rng.integers(-(2**31), 2**31, classes)) for _ in range(2000)]
    for sums in cases:
        combine_sum = 0.0
        for g in reversed(range(classes)):
            combine_sum = combine_sum + float(sums[g]) * 2.0 ** -(w0 + step * g)
        total = sum(int(sums[g]) << (step * (classes - 1 - g)) for g in range(classes))
        assert -(2**62) < total < 2**62
        assert float(total) * 2.0 ** -(w0 + step * (classes - 1)) == combine_sum, sums

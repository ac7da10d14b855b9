"""The wgmma kernels' forms (``runtime/cuda/fused_wgmma.py``) against the level ladder and the
kernel source, on any machine: each form is its level's (pairs, slices), each names an entry
point of ``fused_wgmma.cu`` built for that level's slices and classes, its ring fits shared
memory, and (where NVRTC is installed) the built module holds every kernel. The kernels' bits:
the GPU tests of test_fused_wgmma.py."""

from __future__ import annotations

import re

import pytest

from mixpert.runtime import LADDER, get_level
from mixpert.runtime.cuda import fused_wgmma, hopper

SMEM_LIMIT = 227 * 1024  # Hopper's dynamic shared memory a block
ENTRY = re.compile(r"^FUSED_WGMMA_KERNEL\((\w+), (\d+), (\d+)\)", re.MULTILINE)


def entries() -> dict[str, tuple[int, int]]:
    """The kernel source's entry points: name -> (slices, classes)."""
    text = (hopper.KERNELS / fused_wgmma.SOURCE).read_text()
    return {name: (int(s), int(g)) for name, s, g in ENTRY.findall(text)}


@pytest.mark.parametrize("name", sorted(fused_wgmma.FORMS))
def test_each_form_is_its_levels_and_an_entry_of_the_kernel_source(name) -> None:
    level, form = get_level(name), fused_wgmma.FORMS[name]
    assert fused_wgmma.form(level) == form
    classes = max(i + j for i, j in form.pairs) + 1
    assert entries()[form.kernel] == (form.slices, classes)
    stages = fused_wgmma.STAGES[form.slices]
    stage_bytes = form.slices * (fused_wgmma.BLOCK_M + fused_wgmma.BLOCK_N) * fused_wgmma.BLOCK_K
    assert form.smem <= SMEM_LIMIT < form.smem + stage_bytes  # the most stages that fit
    assert stages >= 2  # (a ring of one stage would leave the tensor cores waiting on loads)


def test_levels_of_other_forms_have_no_kernel() -> None:
    others = [level for level in LADDER if level.name not in fused_wgmma.FORMS]
    assert others and all(fused_wgmma.form(level) is None for level in others)
    assert set(fused_wgmma.ROUTED) <= set(fused_wgmma.FORMS)
    assert set(entries()) == {form.kernel for form in fused_wgmma.FORMS.values()}


def test_routed_levels_leave_to_the_class_sums_the_outputs_both_of_whose_sides_reach_theirs():
    for name, side in fused_wgmma.ROUTED.items():
        level = get_level(name)
        if side is None:
            assert not fused_wgmma.pipeline_wins(level, 2**20, 2**20)
            continue
        assert fused_wgmma.pipeline_wins(level, side, side)
        assert not fused_wgmma.pipeline_wins(level, side - 1, 2**20)
        assert not fused_wgmma.pipeline_wins(level, 2**20, side - 1)


def test_the_built_module_holds_every_kernel() -> None:
    pytest.importorskip("cuda.bindings.nvrtc", reason="needs NVRTC (cuda-bindings)")
    try:
        image = hopper.cubin(fused_wgmma.SOURCE)
    except Exception as error:  # no NVRTC library, or one older than sm_90a; not a build error
        if str(error).startswith(f"NVRTC failed on {fused_wgmma.SOURCE}"):
            raise
        pytest.skip(f"NVRTC cannot build sm_90a here: {error}")
    for form in fused_wgmma.FORMS.values():
        assert form.kernel.encode() + b"\0" in image

"""The tuner behind ``mixpert.tune`` and ``tol=``, one room per concept, lowest first:

- ``copies``: deep copies of the arguments, which every profiling run works on;
- ``error_model``: each op's own error, each level's error on generic data of the op's size and
  magnitudes, and the margin a plan needs for inputs it never saw;
- ``inputs``: the tuning input in words, whether it is degenerate, and resamples of it;
- ``progress``: the one line a first call that tunes shows;
- ``targets``: the device a plan is for, the levels weighed there and the cost model;
- ``trip``: what a GPU plan's calls with NumPy arguments move, and the host's own run they must
  beat;
- ``profiling``: runs of the function under candidate plans (``Profiler``, ``Trial``);
- ``acceptance``: the rule a plan must pass (what ``tol`` promises);
- ``search``: MixPert 3.4's greedy walk over the ops' levels;
- ``held_out``: the plan's runs on inputs the walk never saw;
- ``tuned_plan``: the walk's result as a ``Plan`` (``mixpert.plans``, below this package);
- ``tuner``: ``tune``, the walk held to tol on the held-out inputs.
"""

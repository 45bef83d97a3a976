"""Code that runs INSIDE the sandbox, next to the learner's script.

Everything here is untrusted once the learner's code has run: it only records observations
(numbers and tensors) and never decides a verdict. The trusted side in `worker.graders` rebuilds
the same problem from `problems` (pure functions of a seed) and judges the observations.
Depends only on the standard library, torch and safetensors.
"""

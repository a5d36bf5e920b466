"""The reference kernels' internals, plain names inside; :mod:`~ncm_verify.reference.speculative`,
:mod:`~ncm_verify.reference.tree` and :mod:`~ncm_verify.reference.block` are their public face.

`factory.Kernels` builds every kernel of the protocol from a set of step rules: the public face is one instance,
and each planted bug (``ncm_verify.mutants``) builds its own with one rule or step swapped.
"""

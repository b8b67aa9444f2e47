"""Answer-leak checks: does the image hold the answer where its agent can read it?

One container of the image, no test run, after the tests probe's own controls pass (a broken
task is broken already); declared as ``leaks:`` on a tests spec, a dataset entry or a Harbor
dataset entry, off unless declared.

- ``git`` (a tests spec in a git repository): the files the gold patch and the test patch
  leave, hashed as git hashes blobs and looked up in the object store (loose, packed, in a
  reflog, a stash or dangling: ``git cat-file -e``), without ever writing an object; and the
  commits after the base commit reachable from any ref or reflog (``solution_leaked``; the
  test patch's files: ``tests_in_image``). :mod:`.gitstore`.
- ``files``: the solution's and the tests' files, by size then SHA-256, anywhere in the
  image's filesystem the sandbox user can read (Harbor's ``solution/`` and ``tests/``; a spec's
  oracle script or patch, its test patch, the files those patches leave):
  ``solution_in_image`` / ``tests_in_image``. :mod:`.files`.
- ``paths``: the oracle already in the image (``oracle.path``) and the paths ``leaks.solution``
  and ``leaks.tests`` declare, readable by the sandbox user. :mod:`.files`.

:mod:`.verdict` turns what they found into the probe's verdict; :mod:`.check` plans them,
plays them in one container and reuses their outcome per image digest and spec.
"""

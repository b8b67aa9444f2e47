"""Executors: where the checks of a cycle run.

``local`` (the default) runs them in a thread pool against this host's Docker engine, as
:func:`envcheck.executors.cycle.run_cycle` always has. ``ray`` runs each check of an
environment as a Ray task on a worker node that declares the ``docker`` resource, against
that node's engine (:mod:`envcheck.executors.ray`, imported only when chosen;
``pip install envcheck[ray]``).

Whatever the executor, results come back to the caller (the CLI or the daemon), which hands
them to its sink: the caller stays the one writer of the store. The executor never writes
results itself, so a retried attempt can never be recorded twice.

::

    executor = open_executor(ExecutorConfig.parse("ray", ray_address="10.0.0.5:6379"),
                             shapes=store)
    try:
        results = executor.run_cycle(envs, kinds, run_id, sink, services)   # a CLI cycle
        results = executor.check(env, [kind], run_id, sink, services)       # one daemon job
    finally:
        executor.close()
"""

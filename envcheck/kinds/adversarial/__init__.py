"""Adversarial controls: can a do-nothing agent with a known trick collect the reward?

``library`` holds the tricks (scripts run only inside sandboxes); ``play`` runs one in a
sandbox and tells whether it acted at all; ``controls`` plays them against a verification
protocol, judges the outcome and reuses it per image digest and spec (``ledger``). A
protocol plugs in as one :data:`~envcheck.kinds.adversarial.controls.Attempt` callable: play
a trick in a fresh sandbox, verify the way the environment does, say whether the reward was
earned (or that the trick could not act). ``testspec`` is the catalogue's ``tests:``
protocol, ``swebench`` the SWE-bench harness's (a dataset task's test patch re-applied over
the agent's tree), ``harbor`` Harbor's.
"""

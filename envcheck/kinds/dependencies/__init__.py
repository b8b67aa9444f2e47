"""The ``dependencies`` probe: installed state read in one batched command."""

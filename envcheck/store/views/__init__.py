"""Store methods for readers that browse (mixed into ``Store``): the dashboard's aggregated and
paginated reads, one module per dashboard page and ``common`` for what they share, and
``metrics``, what a scrape reads of what changed since the last one.

Every method answers one screen in one or two statements whose cost grows with the page, not
with the fleet (but for the metrics' full reads, run at start and after a catalogue sync):
counts are grouped in the database, lists are filtered, sorted and cut there (``LIMIT``/
``OFFSET``, with the total), and time buckets are computed by the database. Reads use Core
statements and return frozen values, never ORM rows, so results can be cached and pickled
by callers.
"""

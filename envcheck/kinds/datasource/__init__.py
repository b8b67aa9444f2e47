"""The ``datasource`` probe: sampling data APIs, fingerprints, reports."""

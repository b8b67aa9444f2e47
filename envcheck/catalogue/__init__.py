"""The catalogue: YAML with source lines, validated once into frozen models.

Where things live: ``loader.load_catalogue`` reads files into a ``models.Catalogue``;
``models`` holds suites and environments, ``probe_specs`` and ``datasources`` what the probes
check, ``fields`` the shared field types and parsers, ``merge`` how suite defaults apply,
``crossfile`` the checks across files, ``messages`` errors in words, ``yamlsrc`` the YAML
with its source lines (``yamlcompose`` its node tree, composed within the limits),
``yamlvalues`` the same values read fast, without lines, ``keypaths`` where a value is;
``sourcelimits`` how large a file may be, ``sourcefile`` reading one within them;
``harbor_task`` reads a Harbor task folder, ``harbor_env`` maps it onto an environment,
``harbor_spec`` is what the tests probe checks for it, ``treehash`` the hash of a folder's
content. Nothing is re-exported here, so importing one of them costs only it.
"""

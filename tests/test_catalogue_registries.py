"""The catalogue's side of images in a registry: references checked offline at load, the
``pull`` / ``keep`` keys, the watch schedule, and credentials for a registry, each problem with
file, line and key (``envcheck validate`` runs in pre-commit hooks and pull-request CI).

Pure tests (no engine, no registry), and one through the real ``envcheck validate`` command.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from envcheck.catalogue.loader import load_catalogue
from envcheck.core.errors import CatalogueError, CatalogueIssue
from envcheck.core.imageref import ImageRefError, parse_image_ref

ROOT = Path(__file__).resolve().parent.parent
SHA = "sha256:" + "ab" * 32


def write(directory: Path, text: str, name: str = "cat.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def issues(*paths: Path) -> list[CatalogueIssue]:
    with pytest.raises(CatalogueError) as info:
        load_catalogue(list(paths))
    return info.value.issues


def suite(image: str, extra: str = "") -> str:
    """A watched suite of one environment (its image on line 7), then ``extra``."""
    return textwrap.dedent(f"""\
        version: 1
        suites:
          s:
            defaults: {{pull: watch}}
            environments:
              - id: a
                image: "{image}"
        """) + textwrap.dedent(extra)


# --- references -------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "domain", "path", "tag", "digest"), [
    ("ubuntu", "docker.io", "library/ubuntu", None, None),
    ("ubuntu:22.04", "docker.io", "library/ubuntu", "22.04", None),
    ("index.docker.io/org/img", "docker.io", "org/img", None, None),
    ("org/img:v1", "docker.io", "org/img", "v1", None),
    ("127.0.0.1:5000/ns/img:v1", "127.0.0.1:5000", "ns/img", "v1", None),
    ("localhost/img", "localhost", "img", None, None),
    ("ghcr.io/a/b/c:V_1.0-rc", "ghcr.io", "a/b/c", "V_1.0-rc", None),
    (f"ghcr.io/a/b@{SHA}", "ghcr.io", "a/b", None, SHA),
    (f"ghcr.io/a/b:v1@{SHA}", "ghcr.io", "a/b", "v1", SHA),
])
def test_references_are_read_as_the_engine_reads_them(
        text: str, domain: str, path: str, tag: str | None, digest: str | None) -> None:
    ref = parse_image_ref(text)
    assert (ref.domain, ref.path, ref.tag, ref.digest) == (domain, path, tag, digest)
    assert ref.pinned is (digest is not None)
    assert ref.api_host == ("registry-1.docker.io" if domain == "docker.io" else domain)


@pytest.mark.parametrize(("text", "why"), [
    ("", "cannot be empty"),
    ("Ubuntu:22.04", "must be lowercase"),
    ("ghcr.io/Org/img", "must be lowercase"),
    ("img:", "'' is not a tag"),
    ("a b", "whitespace"),
    (" img", "whitespace"),
    ("img:" + "t" * 129, "is not a tag"),
    ("img::v1", "'img:' is not a repository name"),
    ("ns//img", "'ns//img' is not a repository name"),
    ("bad_host.io:x/img", "not a registry host"),
    ("img@sha256:abc", "'sha256:abc' is not a digest"),
    ("img@sha256:" + "A" * 64, "64 lowercase hex"),
    ("x/" * 130 + "y", "longer than 255"),
])
def test_malformed_references_say_why(text: str, why: str) -> None:
    with pytest.raises(ImageRefError, match=why):
        parse_image_ref(text)


def test_a_malformed_image_is_reported_with_file_line_and_key(tmp_path: Path) -> None:
    path = write(tmp_path, suite("Registry.example/Team/Img:v1"))
    [issue] = issues(path)
    assert (issue.file, issue.line, issue.key) == (str(path), 7, "suites.s.environments[0].image")
    assert "must be lowercase" in issue.message


# --- pull, keep, the watch schedule -------------------------------------------------------


def test_pull_defaults_to_never_and_a_suite_can_watch(tmp_path: Path) -> None:
    offline = load_catalogue([write(tmp_path, """\
        version: 1
        suites:
          s:
            environments: [{id: a, image: "img:v1"}]
        """, "offline.yaml")]).environment("a")
    assert (offline.pull, offline.keep, offline.schedules.image) == ("never", False, 300.0)
    watched = load_catalogue([write(tmp_path, suite(
        "127.0.0.1:5000/ns/img:v1"), "watched.yaml")]).environment("a")
    assert watched.pull == "watch"


def test_keep_and_watch_interval_are_read(tmp_path: Path) -> None:
    env = load_catalogue([write(tmp_path, """\
        version: 1
        suites:
          s:
            defaults: {pull: watch, schedules: {image: 10m}}
            environments:
              - {id: a, image: "ghcr.io/org/img:v1", keep: true}
        """)]).environment("a")
    assert (env.keep, env.schedules.image) == (True, 600.0)


def test_an_unknown_pull_mode_is_refused(tmp_path: Path) -> None:
    [issue] = issues(write(tmp_path, """\
        version: 1
        suites:
          s:
            environments:
              - {id: a, image: "img:v1", pull: always}
        """))
    assert (issue.line, issue.key) == (5, "suites.s.environments[0].pull")
    assert "'never'" in issue.message and "'watch'" in issue.message


def test_pull_and_keep_do_not_move_the_spec_hash(tmp_path: Path) -> None:
    from envcheck.core.results import ProbeKind

    plain = load_catalogue([write(tmp_path, """\
        version: 1
        suites:
          s:
            environments: [{id: a, image: "img:v1"}]
        """, "a.yaml")]).environment("a")
    watched = load_catalogue([write(tmp_path, """\
        version: 1
        suites:
          s:
            environments: [{id: a, image: "img:v1", pull: watch, keep: true}]
        """, "b.yaml")]).environment("a")
    for kind in ProbeKind:
        assert plain.spec_hash(kind) == watched.spec_hash(kind)


# --- credentials ------------------------------------------------------------------------


def test_registry_credentials_load_normalised(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    catalogue = load_catalogue([write(tmp_path, suite("img:v1", f"""\
        registries:
          - {{host: index.docker.io, username: bot, password: {{file: {secret}}}}}
          - {{host: "127.0.0.1:5000", username: ci, password: {{env: REG_PW}}}}
        """))])
    hosts = [(r.host, r.username, r.password.env, r.password.file)
             for r in catalogue.registries]
    assert hosts == [("docker.io", "bot", None, str(secret)),
                     ("127.0.0.1:5000", "ci", "REG_PW", None)]
    assert "s3cret" not in repr(catalogue.registries)


def test_a_secret_file_that_does_not_exist_is_reported_at_load(tmp_path: Path) -> None:
    path = write(tmp_path, suite("img:v1", f"""\
        registries:
          - host: ghcr.io
            username: bot
            password: {{file: {tmp_path}/missing}}
        """))
    [issue] = issues(path)
    assert (issue.line, issue.key) == (11, "registries[0].password.file")
    assert f"secret file {tmp_path}/missing does not exist" in issue.message


def test_a_secret_path_that_is_a_folder_is_reported(tmp_path: Path) -> None:
    [issue] = issues(write(tmp_path, suite("img:v1", f"""\
        registries:
          - {{host: ghcr.io, username: bot, password: {{file: {tmp_path}}}}}
        """)))
    assert issue.key == "registries[0].password.file"
    assert "is not a file" in issue.message


def test_a_password_written_in_the_catalogue_is_refused(tmp_path: Path) -> None:
    found = issues(write(tmp_path, suite("img:v1", """\
        registries:
          - {host: ghcr.io, username: bot, password: hunter2}
        """)))
    assert [i.key for i in found] == ["registries[0].password"]
    assert "never written in the catalogue" in found[0].message
    assert "hunter2" not in str(found[0])


def test_one_registry_has_one_set_of_credentials_across_files(tmp_path: Path) -> None:
    first = write(tmp_path, suite("img:v1", """\
        registries:
          - {host: docker.io, username: a, password: {env: A}}
        """), "a.yaml")
    second = write(tmp_path, """\
        version: 1
        registries:
          - {host: registry-1.docker.io, username: b, password: {env: B}}
        """, "b.yaml")
    [issue] = issues(first, second)
    assert (issue.file, issue.line, issue.key) == (str(second), 3, "registries[0].host")
    assert f"duplicate registry id 'docker.io' (first in {first}:9)" in issue.message


def test_validate_reports_a_bad_reference_in_one_line_exit_2(tmp_path: Path) -> None:
    path = write(tmp_path, suite("img::v1"))
    done = subprocess.run([sys.executable, "-m", "envcheck.cli.app", "validate", str(path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    line = next(ln for ln in (done.stdout + done.stderr).splitlines() if "img::v1" in ln)
    assert line == (f"error {path}:7: suites.s.environments[0].image: 'img::v1': 'img:' is not "
                    "a repository name (lowercase letters and digits, separated by . _ __ or -, "
                    "components joined by /)")

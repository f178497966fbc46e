"""``generate --out URL``: fsspec URLs as the output folder, on both backends.

The claims under test: the files behind a URL are byte-identical to a local folder's, the
manifest lives at the same URL, a rerun resumes (after a real SIGKILL too) and refuses
other settings as a local folder does, and a URL that cannot work is refused in one line
before any work. S3 is real S3 protocol: a moto server on a local port, reached by s3fs
over HTTP from this process, from the local worker processes and from Ray workers (the
endpoint comes from storage options in the Python API and from fsspec's
``FSSPEC_S3_*`` variables on the CLI). ``memory://`` exercises the temp-and-move path
used for filesystems without atomic PUTs.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import pickle
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from robustlab import cli
from robustlab.workflows.demo import materialise
from robustlab.errors import (
    EnvironmentProblem,
    InputChangedError,
    InputError,
    MissingResourceError,
)
from robustlab.workflows.generate import MANIFEST, TEMP_SUFFIX, generate
from robustlab.records.manifest import LOCK
from robustlab.files.outputs import UrlFolder, open_folder
from robustlab.files.hashes import HASHES

SHIFTS = ["gaussian_noise", "brightness"]  # random and deterministic; neither compiles numba
LEVELS = [1, 3]


def _local_files(out: Path) -> dict[str, bytes]:
    return {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name not in (MANIFEST, LOCK) and HASHES not in p.parts
    }


def _url_files(fs, root: str) -> dict[str, bytes]:
    """Every object under ``root`` but the manifest and the hash journals, keyed like
    :func:`_local_files`."""
    fs.invalidate_cache()
    root = root.rstrip("/")
    return {
        p[len(root) + 1 :]: fs.cat_file(p)
        for p in sorted(fs.find(root))
        if not p.endswith("/" + MANIFEST) and f"/{HASHES}/" not in p
    }


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    data, _ = materialise(tmp_path_factory.mktemp("urls") / "demo", photos=2)
    return data


@pytest.fixture(scope="module")
def local_files(photos, tmp_path_factory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("urls-local") / "out"
    generate("imagenet-c", photos, out, shifts=SHIFTS, levels=LEVELS, workers=0, progress=False)
    files = _local_files(out)
    assert len(files) == 2 * len(SHIFTS) * len(LEVELS)
    return files


# --------------------------------------------------------------------------- memory://
def test_memory_url_same_bytes_manifest_and_resume(photos, local_files):
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"/gen-{uuid.uuid4().hex[:8]}/out"
    url = f"memory://{root}"
    kw = dict(shifts=SHIFTS, levels=LEVELS, workers=0, progress=False)
    res = generate("imagenet-c", photos, url, **kw)
    assert (res.out, res.manifest_path) == (url, f"{url}/{MANIFEST}")
    assert res.written == len(local_files)
    assert _url_files(fs, root) == local_files
    manifest = json.loads(fs.cat_file(f"{root}/{MANIFEST}"))
    assert manifest["status"] == "complete" and manifest["counts"]["written"] == len(local_files)

    # A crash mid-write leaves a temp file (here: of a writer that is gone) and no cell.
    victim = sorted(local_files)[0]
    parent, name = victim.rsplit("/", 1)
    fs.rm_file(f"{root}/{victim}")
    stale = f"{root}/{parent}/.{name}.999999999{TEMP_SUFFIX}"
    fs.pipe_file(stale, b"half an image")
    stale_top = f"{root}/.labels.npy.999999999{TEMP_SUFFIX}"  # an array's, at the top
    fs.pipe_file(stale_top, b"half an array")
    manifest_tmp = f"{root}/.{MANIFEST}.999999999{TEMP_SUFFIX}"  # left: written under a lock
    fs.pipe_file(manifest_tmp, b"half a manifest")
    again = generate("imagenet-c", photos, url, **kw)
    assert (again.written, again.skipped_existing) == (1, len(local_files) - 1)
    assert not fs.exists(stale) and not fs.exists(stale_top)
    fs.rm_file(manifest_tmp)
    assert _url_files(fs, root) == local_files
    manifest = json.loads(fs.cat_file(f"{root}/{MANIFEST}"))
    assert [r["status"] for r in manifest["runs"]] == ["complete", "complete"]
    assert manifest["counts"]["written"] == len(local_files)  # counted at the URL

    with pytest.raises(InputChangedError, match="seed 0 -> 7"):
        generate("imagenet-c", photos, url, **{**kw, "seed": 7})


def test_a_url_folder_records_hashes_and_redraws_what_no_journal_records(photos, local_files):
    """At a URL the journal is written whole when the run ends (an object store cannot
    append): evaluate-side checks see the same hashes as a local folder's; an object no
    journal records (a killed run's in flight) is drawn again by the rerun."""
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"/gen-{uuid.uuid4().hex[:8]}/out"
    url = f"memory://{root}"
    kw = dict(shifts=SHIFTS, levels=LEVELS, workers=0, progress=False)
    generate("imagenet-c", photos, url, **kw)
    (journal,) = fs.find(f"{root}/{HASHES}")
    lines = fs.cat_file(journal).decode().splitlines()
    assert len(lines) == len(local_files)
    recorded = {tuple(json.loads(line)[1:3]) for line in lines}
    assert recorded == {(sh, str(lv)) for sh in SHIFTS for lv in LEVELS}
    fs.pipe_file(journal, "".join(line + "\n" for line in lines[1:]).encode())
    again = generate("imagenet-c", photos, url, **kw)
    assert len(again.redrawn) == 1 and again.written == 1
    assert _url_files(fs, root) == local_files


def test_memory_url_is_refused_for_worker_processes(photos):
    with pytest.raises(InputError, match="this process only"):
        generate("imagenet-c", photos, "memory://x/out", shifts=SHIFTS, workers=2, progress=False)


def test_file_url_is_the_local_folder(tmp_path):
    folder = open_folder(f"file://{tmp_path}/out")
    assert not isinstance(folder, UrlFolder) and folder.location == tmp_path / "out"


def test_url_errors_are_one_line_before_any_work(photos, capsys):
    missing = next(
        (m for m in ("gcsfs", "adlfs", "ocifs") if importlib.util.find_spec(m) is None), None
    )
    if missing is not None:
        proto = {"gcsfs": "gcs", "adlfs": "abfs", "ocifs": "oci"}[missing]
        with pytest.raises(MissingResourceError, match=f"{proto}:// needs {missing}") as err:
            generate("imagenet-c", photos, f"{proto}://bucket/out", progress=False)
        assert err.value.hint == f"pip install {missing}"
    with pytest.raises(InputError, match="fsspec knows no protocol"):
        generate("imagenet-c", photos, "nosuchproto://bucket/out", progress=False)
    rc = cli.main(["generate", "imagenet-c", "--data", str(photos), "--out", "nosuch://b/o"])
    err_text = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err_text
    assert "robustlab generate: error: --out nosuch://b/o: fsspec knows no protocol" in err_text


# --------------------------------------------------------------------------- s3:// (moto)
@pytest.fixture(scope="module")
def s3():
    """A real S3 endpoint on a local port: (storage options, s3fs filesystem)."""
    pytest.importorskip("s3fs", reason="the S3 tests need s3fs (part of the test extra)")
    server_mod = pytest.importorskip(
        "moto.server", reason="the S3 tests need moto[server] (part of the test extra)"
    )
    import fsspec

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {"endpoint_url": f"http://{host}:{port}", "key": "testing", "secret": "testing"}
    yield options, fsspec.filesystem("s3", **options)
    server.stop()


@pytest.fixture
def bucket(s3) -> str:
    name = f"b{uuid.uuid4().hex[:12]}"
    s3[1].mkdir(name)
    return name


@pytest.mark.long
def test_s3_worker_processes_same_bytes_resume_and_refusal(photos, local_files, s3, bucket):
    options, fs = s3
    url = f"s3://{bucket}/imagenet-c"
    kw = dict(shifts=SHIFTS, levels=LEVELS, workers=2, progress=False, storage_options=options)
    res = generate("imagenet-c", photos, url, **kw)
    assert (res.written, res.failed, res.skipped_inputs) == (len(local_files), 0, [])
    # One PUT per object, no temp objects, no probe left behind.
    assert _url_files(fs, f"{bucket}/imagenet-c") == local_files
    manifest = json.loads(fs.cat_file(f"{bucket}/imagenet-c/{MANIFEST}"))
    assert manifest["status"] == "complete" and "testing" not in json.dumps(manifest)

    fs.rm_file(f"{bucket}/imagenet-c/{sorted(local_files)[-1]}")
    again = generate("imagenet-c", photos, url, **kw)
    assert (again.written, again.skipped_existing) == (1, len(local_files) - 1)
    assert _url_files(fs, f"{bucket}/imagenet-c") == local_files
    with pytest.raises(InputChangedError, match="seed 0 -> 3"):
        generate("imagenet-c", photos, url, **{**kw, "seed": 3})


def test_s3_missing_bucket_bad_option_and_unreachable_endpoint(photos, s3):
    options, _ = s3
    with pytest.raises(MissingResourceError, match="not found") as err:
        generate("imagenet-c", photos, "s3://no-such-bucket/x", storage_options=options)
    assert "create the bucket" in err.value.hint
    with pytest.raises(InputError, match="storage option is not accepted"):
        generate("imagenet-c", photos, "s3://any/x", storage_options={**options, "retries": 1})
    # A closed port, with botocore's retries cut so the test does not wait for them.
    dead = {
        **options,
        "endpoint_url": "http://127.0.0.1:9",
        "config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 2},
    }
    with pytest.raises(EnvironmentProblem, match="cannot write to s3://any/x: .*Connect"):
        generate("imagenet-c", photos, "s3://any/x", storage_options=dead)


def test_a_worker_without_the_filesystem_package_fails_in_one_line(s3, bucket, tmp_path):
    """A worker (a Ray node) that lacks s3fs receives its job, and the first file access
    raises the MissingResourceError that the driver prints, naming the package."""
    options, _ = s3
    folder = open_folder(f"s3://{bucket}/x", options)
    (tmp_path / "folder.pkl").write_bytes(pickle.dumps(folder))
    code = (
        "import pickle, sys\n"
        "sys.modules['s3fs'] = None  # this node has no s3fs\n"
        f"folder = pickle.loads(open({str(tmp_path / 'folder.pkl')!r}, 'rb').read())\n"
        "try:\n"
        "    folder.exists('a.jpg')\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc, '|', exc.hint)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], **_TEXT)
    assert done.stdout.startswith(f"MissingResourceError s3://{bucket}/x needs s3fs on "), (
        done.stdout + done.stderr
    )
    assert done.stdout.strip().endswith("| pip install s3fs on every node that runs workers")


def test_s3_on_ray_same_bytes(photos, local_files, s3, bucket, ray_cluster):
    options, fs = s3
    res = generate(
        "imagenet-c",
        photos,
        f"s3://{bucket}/ray",
        shifts=SHIFTS,
        levels=LEVELS,
        workers=2,
        progress=False,
        backend="ray",
        storage_options=options,
    )
    assert (res.written, res.failed) == (len(local_files), 0)
    assert _url_files(fs, f"{bucket}/ray") == local_files
    manifest = json.loads(fs.cat_file(f"{bucket}/ray/{MANIFEST}"))
    assert manifest["runs"][-1]["backend"] == "ray"


def _cli_env(options: dict) -> dict:
    """fsspec's own config route: what a user exports for a non-AWS endpoint."""
    return {
        **os.environ,
        "FSSPEC_S3_ENDPOINT_URL": options["endpoint_url"],
        "FSSPEC_S3_KEY": options["key"],
        "FSSPEC_S3_SECRET": options["secret"],
    }


@pytest.mark.long
def test_s3_cli_takes_the_endpoint_from_fsspec_config(
    photos, local_files, s3, bucket, monkeypatch, capsys
):
    """``FSSPEC_S3_*`` variables reach the CLI's filesystem and, through it, its worker
    process; a missing bucket is one line, exit 2."""
    options, fs = s3
    argv = [sys.executable, "-m", "robustlab.cli", "generate", "imagenet-c", "--data"]
    argv += [str(photos), "--shifts", ",".join(SHIFTS), "--levels", "1,3", "--workers", "1"]
    argv += ["--no-progress", "--out"]
    done = subprocess.run([*argv, f"s3://{bucket}/cli"], env=_cli_env(options), **_TEXT)
    assert done.returncode == 0, done.stderr
    assert f"s3://{bucket}/cli: {len(local_files)} written" in done.stdout
    assert _url_files(fs, f"{bucket}/cli") == local_files

    # In this process: the config those variables fill, set directly.
    import fsspec.config

    monkeypatch.setitem(fsspec.config.conf, "s3", dict(options))
    rc = cli.main([*argv[3:], "s3://no-such-bucket/cli"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    errors = [ln for ln in err.splitlines() if ln.startswith("robustlab generate: error:")]
    assert errors == [
        "robustlab generate: error: cannot write to s3://no-such-bucket/cli: not found "
        "(The specified bucket does not exist)"
    ]


_TEXT = dict(capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "ray"])
def test_s3_cli_resumes_after_sigkill(s3, bucket, tmp_path, backend, request):
    """SIGKILL of ``robustlab generate --out s3://...`` once the first object exists; the
    rerun (same command) completes the folder with the local bytes, on either backend."""
    options, fs = s3
    url = f"s3://{bucket}/killed"
    data, _ = materialise(tmp_path / "demo")  # every demo photo: enough work to interrupt
    local = tmp_path / "local"
    cmd = ["generate", "imagenet-c", "--data", str(data), "--shifts", ",".join(SHIFTS)]
    cmd += ["--levels", "1-5", "--workers", "1", "--no-progress", "--backend", backend]
    if backend == "ray":
        cmd += ["--address", request.getfixturevalue("ray_cluster")]
    generate("imagenet-c", data, local, shifts=SHIFTS, levels="1-5", workers=0, progress=False)
    argv = [sys.executable, "-m", "robustlab.cli", *cmd, "--out", url]
    proc = subprocess.Popen(
        argv, env=_cli_env(options), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            fs.invalidate_cache()
            if any(p.endswith(".jpg") for p in fs.find(f"{bucket}/killed")):
                break
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    partial = _url_files(fs, f"{bucket}/killed")
    expected = _local_files(local)
    assert 0 < len(partial) < len(expected)
    assert all(expected[k] == v for k, v in partial.items())  # what is there is complete

    done = subprocess.run(argv, env=_cli_env(options), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    # A worker of the killed run may finish its image before it notices. Every object seen
    # above is kept, or drawn again when the killed run's record did not vouch for it yet
    # ("redrawn"); the rest is written once.
    found = re.search(
        r"(\d+) written(?: \((\d+) redrawn[^)]*\))?, (\d+) already there", done.stdout
    )
    assert found, done.stdout
    written, redrawn, kept = (int(g or 0) for g in found.groups())
    assert written + kept == len(expected) and kept + redrawn >= len(partial)
    assert _url_files(fs, f"{bucket}/killed") == expected
    manifest = json.loads(fs.cat_file(f"{bucket}/killed/{MANIFEST}"))
    assert [r["status"] for r in manifest["runs"]] == ["killed", "complete"]

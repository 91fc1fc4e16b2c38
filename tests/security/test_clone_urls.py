"""Attack 4 of issue 11: a tenant's ``clone_url`` aimed at the host.

Each attack is tried at registration (``validate_clone_url``, what the API and the CLI run)
and on the worker (``GitMirror``, which checks again before every clone or fetch, since a row
may predate the rules). No test sends a packet to a non-loopback address: remote refusals
happen before git starts, which the listening sockets below prove by staying silent; the tests
where git does connect allow only loopback and resolve names with a stub.
"""

from __future__ import annotations

import http.server
import ipaddress
import os
import socket
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.ci.git import FETCH_FAILED, GitError, GitMirror, InvalidRequest
from leasehold.clone_urls import ADDRESS_REFUSED, ClonePolicy, CloneUrlRefused, RemoteRepo, address_refusal, parse
from leasehold.clone_urls import resolve_checked as checked_addresses
from leasehold.records.ci.repos import RepoError, validate_clone_url
from leasehold.settings import Settings

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"),)
SHA_ZERO = "0" * 40
# Every wait for a connection is bounded.
ACCEPT_SECONDS = 10.0


def git(cwd: Path, *args: str) -> str:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(cwd),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
    }
    result = subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True, timeout=60)
    return result.stdout.strip()


def make_repo(path: Path, workflow: str = "on: push\njobs: {}\n") -> str:
    """A repository at ``path`` with one commit; returns its sha."""
    (path / ".github" / "workflows").mkdir(parents=True)
    (path / ".github" / "workflows" / "ci.yml").write_text(workflow)
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "one")
    return git(path, "rev-parse", "HEAD")


class Layout:
    """A local repository root, the data dir inside it (as in the tests' stacks) and a
    directory outside it, each holding a real repository."""

    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "repos"
        self.data = tmp / "repos" / "data"
        self.outside = tmp / "outside"
        self.inside_repo = self.root / "ok"
        self.inside_sha = make_repo(self.inside_repo)
        self.outside_repo = self.outside / "secret"
        make_repo(self.outside_repo)
        self.data.mkdir(parents=True)
        self.settings = Settings(data_dir=self.data, ci_local_repo_root=self.root)
        self.policy = ClonePolicy.from_settings(self.settings)

    def mirror(self, policy: ClonePolicy | None = None, resolver=None) -> GitMirror:  # type: ignore[no-untyped-def]
        kwargs = {"resolver": resolver} if resolver is not None else {}
        return GitMirror(self.data / "ci" / "mirrors", policy or self.policy, **kwargs)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A listening loopback TCP socket: proof of whether anything connected."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    try:
        yield sock
    finally:
        sock.close()


def assert_no_connection(sock: socket.socket) -> None:
    with pytest.raises(BlockingIOError):
        conn, _ = sock.accept()
        conn.close()


def refused_at_registration(url: str, policy: ClonePolicy) -> str:
    with pytest.raises(RepoError) as caught:
        validate_clone_url(url, policy)
    assert caught.value.field == "clone_url"
    return caught.value.message


def refused_on_worker(mirror: GitMirror, url: str) -> str:
    with pytest.raises(InvalidRequest) as caught:
        mirror.ensure_commit("repo_attack", url, SHA_ZERO)
    return str(caught.value)


# Remote URLs at the host -----------------------------------------------------------------


def test_loopback_https_is_refused_before_connecting(layout: Layout, listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    for url in (
        f"https://127.0.0.1:{port}/x.git",
        f"https://127.1:{port}/x.git",  # short dotted form
        f"https://2130706433:{port}/x.git",  # decimal
        f"https://0177.0.0.1:{port}/x.git",  # octal
        f"https://0x7f000001:{port}/x.git",  # hex
        f"https://[::ffff:127.0.0.1]:{port}/x.git",  # IPv4-mapped IPv6
        f"https://localhost:{port}/x.git",
        f"https://LOCALHOST.:{port}/x.git",
        f"https://ci.localhost:{port}/x.git",
    ):
        refused_at_registration(url, layout.policy)
        refused_on_worker(layout.mirror(), url)
    assert_no_connection(listener)
    assert not any(layout.mirror().root.glob("*.git")), "no mirror may be made"


def test_ipv6_loopback_is_refused_before_connecting(layout: Layout) -> None:
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    try:
        sock.bind(("::1", 0))
        sock.listen(1)
        sock.setblocking(False)
        url = f"https://[::1]:{sock.getsockname()[1]}/x.git"
        assert "public address" in refused_at_registration(url, layout.policy)
        refused_on_worker(layout.mirror(), url)
        assert_no_connection(sock)
    finally:
        sock.close()


def test_a_name_that_resolves_to_loopback_is_refused_by_the_worker(layout: Layout, listener: socket.socket) -> None:
    # An operator allow-listing the name does not make its address acceptable: the worker
    # resolves "localhost" with the system resolver and refuses 127.0.0.1 / ::1.
    policy = ClonePolicy(hosts=("localhost",), local_root=layout.root, forbidden_dirs=(layout.data,))
    url = f"https://localhost:{listener.getsockname()[1]}/x.git"
    assert validate_clone_url(url, policy) == url
    assert refused_on_worker(layout.mirror(policy), url) == ADDRESS_REFUSED
    assert_no_connection(listener)


def test_dns_rebinding_any_private_answer_refuses_the_name(layout: Layout, listener: socket.socket) -> None:
    # The name passes registration; at connect time one answer is public and one is loopback.
    port = listener.getsockname()[1]
    answers = {"rebind.example.com": ["93.184.215.14", "127.0.0.1"], "meta.example.com": ["169.254.169.254"]}
    mirror = layout.mirror(resolver=lambda host, _port: answers[host])
    for host in answers:
        url = f"https://{host}:{port}/x.git"
        assert validate_clone_url(url, layout.policy) == url
        assert refused_on_worker(mirror, url) == ADDRESS_REFUSED
    assert_no_connection(listener)


def test_unresolvable_and_private_names_get_the_same_reason(layout: Layout) -> None:
    def resolver(host: str, port: int) -> list[str]:
        if host == "gone.example.com":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return ["10.0.0.5"]

    mirror = layout.mirror(resolver=resolver)
    reasons = {refused_on_worker(mirror, f"https://{h}/x.git") for h in ("gone.example.com", "intranet.example.com")}
    assert reasons == {ADDRESS_REFUSED}


def test_git_is_pinned_to_the_checked_address(layout: Layout, listener: socket.socket) -> None:
    # "pinned.example.test" exists in no DNS (.test is reserved): git can reach the loopback
    # listener only through the address the worker checked and pinned.
    port = listener.getsockname()[1]
    calls: list[str] = []

    def resolver(host: str, _port: int) -> list[str]:
        calls.append(host)
        return ["127.0.0.1"]

    policy = ClonePolicy(allow_private=LOOPBACK)
    mirror = layout.mirror(policy, resolver)
    url = f"https://pinned.example.test:{port}/x.git"
    _, config, protocol = mirror.source(url)
    assert f"http.curloptResolve=pinned.example.test:{port}:127.0.0.1" in config
    assert "http.followRedirects=false" in config and protocol == "https"
    calls.clear()

    accepted: list[bool] = []

    def accept_one() -> None:
        listener.settimeout(ACCEPT_SECONDS)
        try:
            conn, _ = listener.accept()
            accepted.append(True)
            conn.close()
        except OSError:
            pass

    thread = threading.Thread(target=accept_one)
    thread.start()
    with pytest.raises(GitError) as caught:
        mirror.ensure_commit("repo_pinned", url, SHA_ZERO)
    thread.join(ACCEPT_SECONDS + 5)
    assert accepted == [True], "git must connect to the pinned address"
    assert calls == ["pinned.example.test"], "the worker resolves once, itself"
    assert str(caught.value) == FETCH_FAILED and "127.0.0.1" not in str(caught.value)


def test_redirects_are_not_followed(layout: Layout, listener: socket.socket) -> None:
    # A public-looking server answers with a redirect to a private address; git must not go.
    target = f"http://127.0.0.1:{listener.getsockname()[1]}/inner.git"
    hits: list[str] = []

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(302)
            self.send_header("Location", target + self.path)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        policy = ClonePolicy(schemes=frozenset({"http"}), allow_private=LOOPBACK)
        mirror = layout.mirror(policy, lambda _h, _p: ["127.0.0.1"])
        with pytest.raises(GitError) as caught:
            mirror.ensure_commit("repo_redirect", f"http://redirect.example.test:{server.server_port}/x.git", SHA_ZERO)
        assert str(caught.value) == FETCH_FAILED
        assert hits, "git asked the redirecting server"
        assert_no_connection(listener)
    finally:
        server.shutdown()
        server.server_close()


def test_open_and_closed_ports_give_the_same_message(layout: Layout, listener: socket.socket) -> None:
    # With loopback allowed (so git really connects), an open port and a closed one still
    # read the same to the tenant. The open one accepts and hangs up (a silent one would hold
    # git until its timeout: curl has no handshake timeout git exposes).
    stop = threading.Event()

    def hang_up() -> None:
        listener.settimeout(0.2)
        for _ in range(int(ACCEPT_SECONDS / 0.2)):
            if stop.is_set():
                return
            try:
                conn, _ = listener.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=hang_up)
    thread.start()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    mirror = layout.mirror(ClonePolicy(allow_private=LOOPBACK), lambda _h, _p: ["127.0.0.1"])
    messages = set()
    try:
        for port in (listener.getsockname()[1], closed_port):
            with pytest.raises(GitError) as caught:
                mirror.ensure_commit(f"repo_port_{port}", f"https://probe.example.test:{port}/x.git", SHA_ZERO)
            messages.add(str(caught.value))
    finally:
        stop.set()
        thread.join(ACCEPT_SECONDS)
    assert messages == {FETCH_FAILED}


@pytest.mark.parametrize(
    "url",
    [
        "ext::sh -c touch% /tmp/pwned",
        "fd::0",
        "ssh://git@example.com/a/b.git",
        "git://example.com/a/b.git",
        "git@example.com:a/b.git",
        "http://git.example.com/a/b.git",  # not in the default schemes
        "https://user:pass@git.example.com/a/b.git",
        "https://git.example.com",  # no repository path
        "https://[fe80::1%25eth0]/x.git",
        "https://169.254.169.254/latest/meta-data",
        "https://100.64.0.1/x.git",
        "https://224.0.0.1/x.git",
        "https://0.0.0.0/x.git",
        "https://[fd00:ec2::254]/x.git",
        "https://gitlab/x.git",  # single label: the operator's search domains decide
        "https://git.corp.internal/x.git",
        "https://git.example.com/a\n.git",
    ],
)
def test_other_schemes_and_hosts_are_refused(layout: Layout, url: str) -> None:
    refused_at_registration(url, layout.policy)
    refused_on_worker(layout.mirror(), url)


def test_metadata_addresses_stay_refused_when_their_range_is_allowed() -> None:
    allow = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fd00::/8"))
    assert address_refusal(ipaddress.ip_address("169.254.1.1"), allow) is None
    for address in ("169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254"):
        assert address_refusal(ipaddress.ip_address(address), allow) == "a cloud metadata address"


def test_operator_host_allow_list_and_private_ranges(layout: Layout) -> None:
    policy = ClonePolicy(
        hosts=("git.example.com", "*.corp.example"), allow_private=(ipaddress.ip_network("10.1.0.0/16"),)
    )
    for ok in ("https://git.example.com/a.git", "https://src.corp.example/a.git"):
        assert validate_clone_url(ok, policy) == ok
    for bad in ("https://github.com/a.git", "https://corp.example/a.git", "https://evilcorp.example/a.git"):
        assert "hosts this deployment clones from" in refused_at_registration(bad, policy)
    repo = parse("https://src.corp.example/a.git", policy)
    assert isinstance(repo, RemoteRepo)
    assert checked_addresses(repo, policy, lambda _h, _p: ["10.1.2.3"]) == ["10.1.2.3"]
    with pytest.raises(CloneUrlRefused):
        checked_addresses(repo, policy, lambda _h, _p: ["10.2.0.1"])


def test_a_bad_allow_list_setting_stops_start_up() -> None:
    with pytest.raises(ValueError, match="ci_clone_schemes"):
        ClonePolicy.from_settings(Settings(ci_clone_schemes=["https", "ext"]))
    with pytest.raises(ValueError, match="ci_clone_allow_private"):
        ClonePolicy.from_settings(Settings(ci_clone_allow_private=["10.0.0.0/33"]))


# Local paths -----------------------------------------------------------------------------


def test_local_paths_are_refused_without_a_root(layout: Layout) -> None:
    policy = ClonePolicy.from_settings(Settings(data_dir=layout.data))
    for url in (str(layout.inside_repo), f"file://{layout.inside_repo}"):
        assert "LEASEHOLD_CI_LOCAL_REPO_ROOT" in refused_at_registration(url, policy)
        # A row registered while the root was set is refused once it is unset.
        refused_on_worker(layout.mirror(policy), url)


def test_local_paths_outside_the_root_are_refused(layout: Layout, tmp_path: Path) -> None:
    mirror_of_another_tenant = layout.mirror().path("repo_victim")
    (layout.root / "escape").symlink_to(layout.outside_repo, target_is_directory=True)
    attacks = [
        "/etc",
        "/root",
        "file:///etc/passwd",
        str(layout.outside_repo),
        f"file://{layout.outside_repo}",
        f"file://localhost{layout.outside_repo}",
        f"{layout.root}/../outside/secret",  # .. escape
        f"file://{layout.root}/%2E%2E/outside/secret",  # percent-encoded ..
        str(layout.root / "escape"),  # a symlink inside the root, pointing out
        str(layout.root / "escape" / ".git"),
        str(layout.data),  # the data dir lies inside the root here: still refused
        str(mirror_of_another_tenant),
        f"file://{mirror_of_another_tenant}",
        f"{layout.root}/ok/../data/ci/mirrors",
    ]
    for url in attacks:
        reason = refused_at_registration(url, layout.policy)
        assert refused_on_worker(layout.mirror(), url) == reason
    assert not list(layout.mirror().root.glob("repo_attack*")), "nothing was cloned"


def test_existing_and_missing_paths_read_the_same(layout: Layout) -> None:
    # Outside the root: the same refusal, whether the path exists or not.
    outside = {refused_at_registration(p, layout.policy) for p in (str(layout.outside_repo), "/no/such/repo")}
    assert len(outside) == 1
    # Inside it: registration accepts both (it never looks); the worker's failures read alike.
    (layout.root / "plain-file").write_text("not a repository")
    messages = set()
    for name in ("plain-file", "missing", "empty-dir"):
        if name == "empty-dir":
            (layout.root / name).mkdir()
        path = str(layout.root / name)
        assert validate_clone_url(path, layout.policy) == path
        with pytest.raises(GitError) as caught:
            layout.mirror().ensure_commit(f"repo_{name}", path, SHA_ZERO)
        messages.add(str(caught.value))
    assert messages == {FETCH_FAILED}


def test_a_local_repository_pointing_at_other_object_stores_is_refused(layout: Layout) -> None:
    victim = layout.data / "ci" / "mirrors" / "victim.git"
    git(layout.root, "init", "-q", "--bare", str(victim))
    sneaky = layout.root / "sneaky.git"
    git(layout.root, "init", "-q", "--bare", str(sneaky))
    (sneaky / "objects" / "info" / "alternates").write_text(f"{victim}/objects\n")
    linked = layout.root / "linked.git"
    git(layout.root, "init", "-q", "--bare", str(linked))
    (linked / "packed-refs").symlink_to(victim / "HEAD")
    for repo in (sneaky, linked):
        assert validate_clone_url(str(repo), layout.policy) == str(repo)
        assert refused_on_worker(layout.mirror(), str(repo)) == FETCH_FAILED


def test_an_allowed_local_repository_works_end_to_end(layout: Layout) -> None:
    # Through a symlink that stays inside the root, as an operator's layout might.
    (layout.root / "alias").symlink_to(layout.inside_repo, target_is_directory=True)
    mirror = layout.mirror()
    for url in (str(layout.inside_repo), f"file://{layout.inside_repo}", str(layout.root / "alias")):
        assert validate_clone_url(url, layout.policy) == url
        path = mirror.ensure_commit("repo_ok", url, layout.inside_sha)
        assert [name for name, _ in mirror.workflow_files(path, layout.inside_sha, 1 << 20)] == [
            ".github/workflows/ci.yml"
        ]
    # A new commit arrives by fetch, and the tree checks out.
    (layout.inside_repo / "two.txt").write_text("2")
    git(layout.inside_repo, "add", "-A")
    git(layout.inside_repo, "commit", "-q", "-m", "two")
    second = git(layout.inside_repo, "rev-parse", "HEAD")
    _, heads = mirror.fetch_heads("repo_ok", str(layout.inside_repo))
    assert heads == {"main": second}
    path = mirror.ensure_commit("repo_ok", str(layout.inside_repo), second)
    proc = mirror.archive_stream(path, second)
    assert proc.stdout is not None
    # The test reads the stream; jobs get it unpacked by the job-side helper, as the job.
    contents = {}
    with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
        for member in tar:
            if member.isfile() and (f := tar.extractfile(member)) is not None:
                contents[member.name] = f.read()
    mirror.finish_archive(proc, path, second)
    assert contents["two.txt"] == b"2"

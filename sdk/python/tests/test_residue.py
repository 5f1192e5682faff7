"""The conftest's residue check finds what a daemon of the run's instance could leave on the host, and only that:
a cgroup in every hierarchy (v1 controllers, the v2/unified tree), an nft table, a mount under the state dir,
each named by the instance; another instance's objects are not this run's. Made here by hand, removed in finally.
Needs root (cgroups, nft, mount), as the daemon tests do."""

import os
import secrets
import subprocess
import tempfile

import pytest

from conftest import residue

from _data import CI


def test_residue_finds_the_instances_objects_only():
    if os.geteuid() != 0:
        if CI:
            pytest.fail("CI runs as root; this test makes cgroups, an nft table and a mount")
        pytest.skip("needs root")
    inst, other = "q" + secrets.token_hex(2), "q" + secrets.token_hex(2)
    state = tempfile.mkdtemp(prefix=f"drums-test-{inst}-", dir="/var/tmp")
    root = "/sys/fs/cgroup"
    bases = [root] + [os.path.join(root, c) for c in os.listdir(root) if os.path.isdir(os.path.join(root, c))]
    made: list[str] = []
    mnt = os.path.join(state, "m")
    os.mkdir(mnt)
    mounted = table = False
    try:
        assert residue(inst, state) == {"netns": [], "links": [], "tables": [], "mounts": [], "cgroups": []}
        # The daemon's names: its top cgroup drums-<inst> in each hierarchy, where writable (a v2 root or a v1
        # controller; a v1 "name=systemd" hierarchy is too), and another instance's beside it.
        for base in bases:
            for name in (f"drums-{inst}", f"drums-{other}"):
                try:
                    os.mkdir(os.path.join(base, name))
                    made.append(os.path.join(base, name))
                except OSError:
                    pass
        assert any(m.endswith(f"drums-{inst}") for m in made), "no cgroup hierarchy took a new cgroup"
        subprocess.run(["nft", "add", "table", "inet", f"drums_{inst}"], check=True)
        table = True
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", mnt], check=True)
        mounted = True
        r = residue(inst, state)
        assert sorted(r["cgroups"]) == sorted(m for m in made if m.endswith(f"drums-{inst}")), r
        assert r["tables"] == [f"table inet drums_{inst}"], r
        assert r["mounts"] == [mnt], r
        assert not any(other in c for c in r["cgroups"]), "another instance's cgroup is not this run's"
    finally:
        if mounted:
            subprocess.run(["umount", mnt], check=False)
        if table:
            subprocess.run(["nft", "delete", "table", "inet", f"drums_{inst}"], check=False)
        for m in reversed(made):
            os.rmdir(m)
        os.rmdir(mnt)
        os.rmdir(state)
    assert residue(inst, state) == {"netns": [], "links": [], "tables": [], "mounts": [], "cgroups": []}

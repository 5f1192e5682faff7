"""An AgentRL environment driver that hands out Drums sessions (``pip install 'drums[agentrl]'``).

AgentRL's task worker (``agentrl-worker``) gives a task an
``agentrl.worker.environment.EnvironmentController``; the task calls
``start_session`` / ``execute_command`` / ``end_session`` on it. This module's
:class:`DrumsEnvironmentController` is such a controller whose environments are
Drums sessions placed over a cluster of Drums hosts (``drums.cluster``):

    from agentrl.worker.environment import EnvironmentDelegation
    from drums.agentrl import DrumsEnvironmentController, create_controller
    controller = create_controller("drums", EnvironmentDelegation("osworld"),
                                   endpoints=[{"url": ..., "token": ...}], specs={"default": {"image": "default"}})
    session_id, env_ids, urls = await controller.start_session("default")
    rc, out, err = await controller.execute_command(env_ids["default"], ["uname", "-a"])
    await controller.reset_session(session_id)       # a fresh desktop, same sessions (Drums reset)
    await controller.end_session(session_id)         # released (pool) or destroyed

- ``start_session(subtypes)`` places one Drums session per subtype (spec from
  ``specs[subtype]``, else ``{"image": subtype}``), all on one host when there
  are several, and returns AgentRL's triple: a session id from the worker's own
  state provider (``local``, ``redis``, ``consul`` or ``etcd``), ``{subtype:
  environment id}`` and ``{subtype: URL}`` (the session's URL on its host's API).
- ``execute_command(env, cmd, timeout)`` is Drums exec: ``(exit code, stdout, stderr)``.
- ``execute_shell(env, cmd)`` runs ``bash -lc cmd`` and returns stdout and stderr
  together (each call is a new shell: cwd and variables do not carry over).
- ``reset_session`` / ``reset_environment`` reset the Drums sessions (AgentRL has no
  reset of its own; its docker driver recreates containers instead).
- ``end_session`` gives the sessions back: ``release`` where the host has warm
  pools, else destroy. ``renew_session`` checks they are still alive (a lost host
  raises ``drums.cluster.SessionLost``). ``release()`` ends them all.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Tuple, Union

from agentrl.worker.environment import EnvironmentController, EnvironmentDelegation
from agentrl.worker.environment import create_controller as _agentrl_create_controller
from agentrl.worker.environment.state import create_state_provider

from .cluster import AsyncClusterClient, ClusterSession, Endpoint


class DrumsEnvironmentController(EnvironmentController):
    def __init__(
        self,
        delegation: EnvironmentDelegation,
        cluster: AsyncClusterClient,
        *,
        specs: Dict[str, Dict[str, Any]] | None = None,
        state_driver: str = "local",
        state_options: Dict[str, Any] | None = None,
    ):
        super().__init__(delegation)
        self.cluster = cluster
        self.specs = specs or {}
        self.valid_subtypes = delegation.get_subtypes()
        self.state = create_state_provider(
            driver=state_driver, prefix=f"agentrl:{delegation.get_name()}:drums", **(state_options or {})
        )
        self._envs: Dict[str, ClusterSession] = {}
        self._started = False
        self._lock = asyncio.Lock()

    async def _ensure_started(self) -> None:
        async with self._lock:
            if not self._started:
                await self.cluster.start()
                self._started = True

    def _spec(self, subtype: str) -> Dict[str, Any]:
        return dict(self.specs.get(subtype) or {"image": subtype})

    def _env(self, environment_id: str) -> ClusterSession:
        try:
            return self._envs[environment_id]
        except KeyError:
            raise KeyError(f"no Drums environment {environment_id!r} in this controller") from None

    # -- AgentRL's EnvironmentController interface

    async def start_session(
        self, subtypes: Union[List[str], str], immutable: bool = True, **kwargs: Any
    ) -> Tuple[str, Dict[str, str], Dict[str, str]]:
        subtypes = subtypes if isinstance(subtypes, list) else [subtypes]
        for st in subtypes:
            if st not in self.valid_subtypes:
                raise ValueError(
                    f"invalid subtype {st!r} for task {self.delegation.get_name()}; valid: {self.valid_subtypes}"
                )
        await self._ensure_started()
        session_id = await self.state.generate_session_id()
        specs = [self._spec(st) for st in subtypes]
        if len(specs) > 1 and all(s == specs[0] for s in specs):
            made = await self.cluster.create_group(len(specs), **specs[0])
        else:
            made = []
            try:
                for spec in specs:
                    made.append(await self.cluster.create(**spec))
            except BaseException:
                await asyncio.gather(*(m.destroy() for m in made), return_exceptions=True)
                raise
        env_ids: Dict[str, str] = {}
        urls: Dict[str, str] = {}
        for st, s in zip(subtypes, made, strict=True):
            self._envs[s.id] = s
            env_ids[st] = s.id
            urls[st] = f"{s.host.endpoint.url}/v1/sessions/{s.id}"
            await self.state.allocate_container(s.id, session_id)
        await self.state.store_session(
            session_id, {"containers": env_ids, "exclusive_containers": list(env_ids.values())}
        )
        return session_id, env_ids, urls

    async def renew_session(self, session_id: str) -> None:
        data = await self.state.get_session(session_id)
        if not data:
            raise KeyError(f"no session {session_id!r}")
        await self.state.renew_session(session_id)
        for env_id in data["containers"].values():
            await self._env(env_id).refresh()

    async def end_session(self, session_id: str) -> None:
        data = await self.state.get_session(session_id)
        if not data:
            return
        for env_id in data["containers"].values():
            s = self._envs.pop(env_id, None)
            if s is not None:
                await s.release()
            await self.state.release_container(env_id, session_id)
            await self.state.remove_container(env_id)
        await self.state.delete_session(session_id)

    async def execute_command(
        self, environment_id: str, command: Union[str, List[str]], timeout: int = 30
    ) -> Tuple[int, bytes, bytes]:
        r = await self._env(environment_id).exec(command, timeout_ms=int(timeout * 1000))
        return r["exitCode"], r["stdout"].encode(), r["stderr"].encode()

    async def create_shell(self, environment_id: str, shell: str = "/bin/bash") -> str:
        self._env(environment_id)
        return environment_id

    async def execute_shell(self, environment_id: str, command: str, timeout: int = 30) -> bytes:
        r = await self._env(environment_id).exec(["bash", "-lc", command + " 2>&1"], timeout_ms=int(timeout * 1000))
        return (r["stdout"] + r["stderr"]).encode()

    async def get_env_variables(self, environment_id: str) -> Dict[str, str]:
        r = await self._env(environment_id).exec(["env", "-0"])
        return dict(kv.split("=", 1) for kv in r["stdout"].split("\0") if "=" in kv)

    # -- Drums' own additions

    async def reset_environment(self, environment_id: str) -> None:
        """A fresh desktop in this environment (Drums reset: new upper layer and processes)."""
        await self._env(environment_id).reset()

    async def reset_session(self, session_id: str) -> None:
        data = await self.state.get_session(session_id)
        if not data:
            raise KeyError(f"no session {session_id!r}")
        await asyncio.gather(*(self.reset_environment(e) for e in data["containers"].values()))

    def session_of(self, environment_id: str) -> ClusterSession:
        """The Drums session behind an environment id (screenshots, actions, files)."""
        return self._env(environment_id)

    async def release(self) -> None:
        """Ends every session this controller handed out and closes the cluster client."""
        await asyncio.gather(*(s.destroy() for s in self._envs.values()), return_exceptions=True)
        self._envs.clear()
        await self.cluster.aclose()
        self._started = False


def create_controller(driver: str, delegation: EnvironmentDelegation, **config: Any) -> EnvironmentController:
    """AgentRL's ``create_controller`` plus driver ``"drums"`` (``endpoints``: a list of
    ``{"url", "token"}`` or :class:`Endpoint`; ``specs``; ``state_driver``/``state_options``;
    other keys go to :class:`AsyncClusterClient`)."""
    if driver != "drums":
        return _agentrl_create_controller(driver, delegation, **config)
    eps = [
        e if isinstance(e, Endpoint) else Endpoint(e["url"], e["token"], e.get("name")) for e in config.pop("endpoints")
    ]
    specs = config.pop("specs", None)
    state_driver = config.pop("state_driver", "local")
    state_options = config.pop("state_options", None)
    return DrumsEnvironmentController(
        delegation,
        AsyncClusterClient(eps, **config),
        specs=specs,
        state_driver=state_driver,
        state_options=state_options,
    )

"""Serve a class from this machine: K identical app processes behind nginx with sticky sessions.

    python scripts/serve_class.py [--replicas K] [--port 8500] [--address 0.0.0.0] [--pair FOLDER]

Starts K `streamlit run app.py` processes (default: one per core) on the loopback ports after
--port, each with one decode worker of one torch thread, and nginx (Debian's `nginx-light`:
`apt-get install nginx-light`) on --port in front of them. nginx keeps each browser on one process:
a browser's first request is routed by a random id that nginx then sets as the `taps_replica`
cookie, and every later request of that browser (its websocket included, where Streamlit keeps
the session) is routed by that cookie to the same process (`hash ... consistent`). A link is
decoded once per process. Ctrl-C stops nginx and every process.

A class server never starts without a lecturer password (docs/serving.md): when
.streamlit/secrets.toml has no `lecturer_password`, this makes one, writes it there (readable by
this user only) and prints it. Students open the printed address; the lecturer signs in with the
password in the sidebar's Lecturer box.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECRETS = ROOT / ".streamlit" / "secrets.toml"   # where `streamlit run app.py` reads secrets from by default

NGINX_CONF = """worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {folder}/body;
  proxy_temp_path {folder}/proxy;
  fastcgi_temp_path {folder}/fastcgi;
  uwsgi_temp_path {folder}/uwsgi;
  scgi_temp_path {folder}/scgi;
  map $http_upgrade $connection_upgrade {{ default upgrade; '' close; }}
  map $cookie_taps_replica $taps_route {{ "" $request_id; default $cookie_taps_replica; }}
  upstream taps {{
    hash $taps_route consistent;
{servers}
  }}
  server {{
    listen {address}:{port};
    location / {{
      proxy_pass http://taps;
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_set_header Host $host;
      proxy_set_header X-Real-IP $remote_addr;        # the browser's address: sign-in tries are counted by it
      proxy_read_timeout 86400s;
      proxy_buffering off;
      add_header Set-Cookie "taps_replica=$taps_route; Path=/; HttpOnly; SameSite=Lax" always;
    }}
  }}
}}
"""


def lecturer_password(path: Path = SECRETS) -> tuple[str, bool]:
    """The lecturer password in the secrets file `path`, made and saved there when there is none
    (returns it and whether it was made now)."""
    text = path.read_text() if path.exists() else ""
    try:
        found = str(tomllib.loads(text).get("lecturer_password") or "").strip() if text else ""
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} is not valid TOML ({exc}): fix it or remove it") from None
    if found:
        return found, False
    made = secrets.token_urlsafe(12)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + ("\n" if text and not text.endswith("\n") else "") + f'lecturer_password = "{made}"\n')
    path.chmod(0o600)
    return made, True


def port_free(port: int) -> bool:
    """Whether nothing listens on (or holds) this loopback port."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def wait_healthy(url: str, process: subprocess.Popen, seconds: float = 180) -> None:
    deadline = time.time() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
                if reply.read().strip() == b"ok":
                    return
        except OSError:
            pass
        if process.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"{url} did not start (exit code {process.poll()})")
        time.sleep(0.5)


class ClassServer:
    """K app processes and nginx in front; `start()` returns the address, `stop()` ends them all."""

    def __init__(self, replicas: int, port: int, address: str = "0.0.0.0", pair: str | None = None,
                 cache: str | None = None, log_folder: Path | None = None, secrets_file: Path = SECRETS):
        self.replicas, self.port, self.address, self.secrets_file = replicas, port, address, secrets_file
        self.env = dict(os.environ, OMP_NUM_THREADS="1", TAPS_DECODE_WORKERS="1",
                        STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
        if pair is not None:
            self.env["TAPS_PAIR"] = pair
        if cache is not None:
            self.env["TAPS_CACHE"] = cache
        self.folder = Path(tempfile.mkdtemp(prefix="taps-class-"))
        self.logs = log_folder or self.folder
        self.apps: list[subprocess.Popen] = []
        self.nginx: subprocess.Popen | None = None

    def start(self) -> str:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(nginx).exists():
            raise RuntimeError("no nginx on this machine: apt-get install nginx-light (macOS: brew install nginx)")
        ports = [self.port + 1 + n for n in range(self.replicas)]
        for port in ports:
            log = (self.logs / f"app-{port}.log").open("w")
            self.apps.append(subprocess.Popen(
                [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
                 "--server.port", str(port), "--server.address", "127.0.0.1",
                 "--secrets.files", str(self.secrets_file)],
                cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT))
        for port, app in zip(ports, self.apps):
            wait_healthy(f"http://127.0.0.1:{port}", app)
        for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
            (self.folder / sub).mkdir(exist_ok=True)
        servers = "\n".join(f"    server 127.0.0.1:{port};" for port in ports)
        conf = self.folder / "nginx.conf"
        conf.write_text(NGINX_CONF.format(folder=self.folder, servers=servers, address=self.address, port=self.port))
        self.nginx = subprocess.Popen([nginx, "-p", str(self.folder), "-c", str(conf), "-g", "daemon off;"],
                                      stdout=subprocess.DEVNULL, stderr=(self.logs / "nginx.log").open("w"))
        url = f"http://127.0.0.1:{self.port}"
        wait_healthy(url, self.nginx, 30)
        return url

    def pids(self) -> list[int]:
        return [app.pid for app in self.apps]

    def stop(self) -> None:
        for process in ([self.nginx] if self.nginx else []) + self.apps:
            if process.poll() is None:
                process.terminate()
        for process in ([self.nginx] if self.nginx else []) + self.apps:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Linux: the cores this process may use; macOS and Windows (no sched_getaffinity): all of them
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    parser.add_argument("--replicas", type=int, default=cores,
                        help="app processes (default: one per core)")
    parser.add_argument("--port", type=int, default=8500, help="the class's port (the processes use the next K)")
    parser.add_argument("--address", default="0.0.0.0", help="where nginx listens (default: every interface)")
    parser.add_argument("--pair", help="the pair folder every process serves (default: $TAPS_PAIR, else the shipped)")
    parser.add_argument("--secrets", type=Path, default=SECRETS,
                        help="the secrets file with the lecturer password (default: .streamlit/secrets.toml)")
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    try:
        password, made = lecturer_password(args.secrets)
    except ValueError as exc:
        parser.error(str(exc))
    server = ClassServer(args.replicas, args.port, args.address, args.pair, secrets_file=args.secrets.resolve())
    stopping = False

    def stop(*_args) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            print("\nStopping the class server…", flush=True)
            server.stop()
        sys.exit(0)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        server.start()
    except RuntimeError as exc:
        server.stop()
        print(f"Could not start the class server: {exc}", file=sys.stderr)
        return 1
    host = args.address if args.address not in ("0.0.0.0", "::") else "<this machine's address>"
    print(f"TAPS Studio for a class: {args.replicas} processes behind nginx at http://{host}:{args.port}\n"
          f"Lecturer password ({'made now and saved in' if made else 'from'} {args.secrets}): "
          f"{password}\nCtrl-C stops it.", flush=True)
    while True:
        for process in server.apps + [server.nginx]:
            if process.poll() is not None:
                print(f"a process of the class server ended (exit code {process.returncode}): stopping",
                      file=sys.stderr)
                server.stop()
                return 1
        time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main())

"""Serve the review page with uvicorn until Ctrl-C or SIGTERM.

Once the socket accepts connections the first stdout line is exactly
``PAYRUN_SERVE_URL=http://HOST:PORT`` (flushed at once); uvicorn's own lines go to stderr.
SIGTERM and Ctrl-C stop it cleanly (exit 0): runs it started are their own processes and go on.
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import Any

import uvicorn

from payrun.serve._app import ServeConfig, create_app
from payrun.serve._users import write_private

__all__ = ["serve", "session_key"]


class _Server(uvicorn.Server):
    """A uvicorn server that prints its address once it accepts connections."""

    def handle_exit(self, sig: int, frame: Any) -> None:
        """Stop gracefully; unlike plain uvicorn, do not re-raise the signal afterwards."""
        super().handle_exit(sig, frame)
        # A server stopped by SIGTERM or Ctrl-C is a clean exit (status 0)
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if not self.started:
            return
        host, port = self.servers[0].sockets[0].getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        sys.stdout.write(f"PAYRUN_SERVE_URL=http://{shown}:{port}\n")
        sys.stdout.flush()


def session_key(ledger_dir: Path) -> str:
    """The key sessions are signed with: kept (0600) so a restart signs nobody out."""
    path = ledger_dir / ".session-key"
    if not path.exists():
        write_private(path, secrets.token_hex(32).encode("ascii"), replace=False)
    return path.read_text(encoding="ascii").strip()


def serve(config: ServeConfig, host: str, port: int) -> int:
    """Serve until stopped; 0 when stopped cleanly."""
    app = create_app(config)
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off"))
    server.run()
    return 0 if server.started else 2

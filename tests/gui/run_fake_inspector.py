"""Run the inspector's real entry point against the fake service (used by the screenshot test)."""

from __future__ import annotations

import sys
import tempfile

from inspector_app.app import main
from tests.gui.fake_service import FakeService, install_demo

if __name__ == "__main__":
    service = FakeService(tempfile.mkdtemp(prefix="inspector-workdir-"))
    install_demo(service)
    sys.exit(main(sys.argv[1:], opener=lambda _url: service))

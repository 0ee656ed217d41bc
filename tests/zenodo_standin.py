"""A local stand-in for zenodo.org, reached the way zenodo_get reaches Zenodo.

zenodo_get hard-codes ``https://zenodo.org/api/records/<id>`` and follows each
file's ``links.self``. It honours ``HTTPS_PROXY`` and ``SSL_CERT_FILE``, so the
stand-in is an HTTP proxy that accepts ``CONNECT zenodo.org:443``, terminates
TLS with a certificate for zenodo.org signed by a throw-away test CA, and
answers the record API and the file URLs like Zenodo (InvenioRDM JSON,
``md5:`` checksums, ``.../files/<key>/content`` links). The real zenodo_get code
runs unchanged: URL building, proxy routing, TLS verification, streaming,
retries, md5 verification and deletion of bad files.

Only the real network exercises DNS and TCP to zenodo.org, the public
certificate chain, the live JSON (this mirrors its documented shape) and
Zenodo's own rate limits and redirects.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOSTS = ("zenodo.org", "sandbox.zenodo.org")


@dataclass
class StoredFile:
    data: bytes
    # Faults: serve different bytes than the md5 says, or cut the body short
    # for the first `truncate_times` requests.
    corrupt: bool = False
    truncate_times: int = 0


@dataclass
class Record:
    files: dict[str, StoredFile] = field(default_factory=dict)
    title: str = "Stand-in record"


def _make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A test CA and a zenodo.org server certificate signed by it (openssl CLI)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise RuntimeError("the Zenodo stand-in needs the openssl command to make its test certificates")
    ca_key, ca_pem = folder / "ca.key", folder / "ca.pem"
    key, csr, pem, ext = folder / "server.key", folder / "server.csr", folder / "server.pem", folder / "server.ext"
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    subprocess.run(
        [openssl, "req", "-x509", *ec, "-keyout", ca_key, "-out", ca_pem, "-days", "2",
         "-subj", "/CN=scalebench test CA",
         "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        [openssl, "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=zenodo.org"], check=True, capture_output=True
    )
    ext.write_text(
        "subjectAltName=" + ",".join(f"DNS:{h}" for h in HOSTS) + "\n"
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "authorityKeyIdentifier=keyid\nsubjectKeyIdentifier=hash\n"
    )
    subprocess.run(
        [openssl, "x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key, "-CAcreateserial",
         "-out", pem, "-days", "2", "-extfile", ext],
        check=True, capture_output=True,
    )  # fmt: skip
    return ca_pem, pem, key


class ZenodoStandIn:
    """Start with ``with ZenodoStandIn(tmp) as zenodo:``; point a process at it with ``zenodo.env()``."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.ca, cert, key = _make_certificates(folder)
        self.tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.tls.load_cert_chain(cert, key)
        self.records: dict[int, Record] = {}
        self.requests: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    def add_record(self, record: int, files: dict[str, bytes], **faults: dict) -> Record:
        """Publish `files` as record `record`; faults: corrupt={name,...}, truncate={name: times}."""
        stored = {
            name: StoredFile(
                data,
                corrupt=name in faults.get("corrupt", ()),
                truncate_times=faults.get("truncate", {}).get(name, 0),
            )
            for name, data in files.items()
        }
        self.records[record] = Record(stored)
        return self.records[record]

    def downloads(self, name: str) -> int:
        """How many times the file `name` was requested."""
        return sum(1 for path in self.requests if path.endswith(f"/files/{name}/content"))

    def env(self) -> dict[str, str]:
        """Environment variables that route zenodo_get (httpx2) to the stand-in."""
        assert self._server is not None, "start the stand-in first"
        proxy = f"http://127.0.0.1:{self._server.server_address[1]}"
        return {
            "HTTPS_PROXY": proxy,
            "https_proxy": proxy,
            "SSL_CERT_FILE": str(self.ca),
            "NO_PROXY": "",
            "no_proxy": "",
        }

    def __enter__(self) -> ZenodoStandIn:
        standin = self

        class Handler(_ProxyHandler):
            owner = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # What the record API answers, in the shape of zenodo.org/api/records/<id>.
    def metadata(self, record_id: int, host: str) -> dict:
        record = self.records[record_id]
        files = []
        for index, (name, stored) in enumerate(record.files.items()):
            files.append(
                {
                    "id": f"00000000-0000-0000-0000-{index:012d}",
                    "key": name,
                    "size": len(stored.data),
                    "checksum": "md5:" + hashlib.md5(stored.data).hexdigest(),
                    "links": {"self": f"https://{host}/api/records/{record_id}/files/{name}/content"},
                }
            )
        return {
            "id": record_id,
            "recid": str(record_id),
            "doi": f"10.5281/zenodo.{record_id}",
            "metadata": {
                "title": record.title,
                "doi": f"10.5281/zenodo.{record_id}",
                "publication_date": "2023-02-14",
                "keywords": [],
                "license": {"id": "cc-by-4.0"},
            },
            "files": files,
            "links": {"self": f"https://{host}/api/records/{record_id}"},
        }


class _ProxyHandler(BaseHTTPRequestHandler):
    """The proxy side: only CONNECT to the Zenodo hosts, everything else is refused."""

    owner: ZenodoStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass

    def do_CONNECT(self) -> None:  # noqa: N802 - http.server's naming
        host, _, port = self.path.partition(":")
        if host not in HOSTS or port != "443":
            self.send_error(403, f"the stand-in answers only {', '.join(HOSTS)}:443")
            return
        self.send_response(200, "Connection Established")
        self.end_headers()
        self.wfile.flush()
        try:
            tls = self.owner.tls.wrap_socket(self.connection, server_side=True)
        except (ssl.SSLError, OSError):
            self.close_connection = True
            return
        _ZenodoHandler(tls, self.client_address, self.server, self.owner, host)
        self.close_connection = True


class _ZenodoHandler(BaseHTTPRequestHandler):
    """The Zenodo side, inside the TLS tunnel."""

    protocol_version = "HTTP/1.1"

    def __init__(self, sock: socket.socket, address, server, owner: ZenodoStandIn, host: str) -> None:
        self.owner, self.host = owner, host
        super().__init__(sock, address, server)

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        pass

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self.owner.requests.append(self.path)
        parts = self.path.split("?")[0].strip("/").split("/")
        # api/records/<id>  and  api/records/<id>/files/<key>/content
        if len(parts) >= 3 and parts[:2] == ["api", "records"] and parts[2].isdigit():
            record = self.owner.records.get(int(parts[2]))
            if record is None:
                self._json(404, {"status": 404, "message": "The persistent identifier does not exist."})
            elif len(parts) == 3:
                self._json(200, self.owner.metadata(int(parts[2]), self.host))
            elif len(parts) == 6 and parts[3] == "files" and parts[5] == "content" and parts[4] in record.files:
                self._file(record.files[parts[4]])
            else:
                self._json(404, {"status": 404, "message": "File not found."})
            return
        self._json(404, {"status": 404, "message": "Not found."})

    def _file(self, stored: StoredFile) -> None:
        data = stored.data
        if stored.corrupt:
            data = bytes([data[0] ^ 0xFF]) + data[1:]
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if stored.truncate_times > 0:
            stored.truncate_times -= 1
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(data)

"""The task's HTTP service: a greeting with a token drawn when the service starts, so only
an agent (and a verifier) that asks this running service knows it."""

import http.server
import secrets

GREETING = f"Hello from the api service, token {secrets.token_hex(8)}!\n".encode()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/greeting":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(GREETING)))
            self.end_headers()
            self.wfile.write(GREETING)
        else:
            self.send_error(404)


http.server.ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()

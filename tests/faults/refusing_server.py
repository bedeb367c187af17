"""refusing_server.py PORT PG_PORT - a stand-in for a PostgreSQL that does not know
client_connection_check_interval (13 and older), in front of a real one on loopback.

A startup packet whose options name that setting gets the FATAL such a server sends
(42704, unrecognized configuration parameter) and the connection is closed; every other
connection is relayed to the real server on PG_PORT as it is. SSL and GSS encryption requests
are declined, as a server without them does. Serves until killed."""
import socket
import struct
import sys
import threading

SSL_REQUEST, GSS_REQUEST, CANCEL_REQUEST = 80877103, 80877104, 80877102


def read_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def refusal():
    fields = b"SFATAL\0VFATAL\0C42704\0"
    fields += b'Munrecognized configuration parameter "client_connection_check_interval"\0\0'
    return b"E" + struct.pack("!I", len(fields) + 4) + fields


def relay(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(client, pg_port):
    try:
        while True:
            (length,) = struct.unpack("!I", read_exact(client, 4))
            body = read_exact(client, length - 4)
            (code,) = struct.unpack("!I", body[:4])
            if code in (SSL_REQUEST, GSS_REQUEST):
                client.sendall(b"N")
                continue
            break
        packet = struct.pack("!I", length) + body
        if code != CANCEL_REQUEST:
            words = body[4:].split(b"\0")
            params = dict(zip(words[0::2], words[1::2]))
            if b"client_connection_check_interval" in params.get(b"options", b"").lower():
                client.sendall(refusal())
                client.close()
                return
        server = socket.create_connection(("127.0.0.1", pg_port))
        server.sendall(packet)
        threading.Thread(target=relay, args=(server, client), daemon=True).start()
        relay(client, server)
    except (OSError, ConnectionError, struct.error):
        client.close()


def main():
    port, pg_port = int(sys.argv[1]), int(sys.argv[2])
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(16)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client, pg_port), daemon=True).start()


main()

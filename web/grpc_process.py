"""The gRPC process: `python -m web.grpc_process` (what `toolnexus-serve grpc`
execs; `python -m web.grpc_server` comes here too) runs `web.grpc_server.main`.

First of all, before redis-py, kombu or grpcio make a socket or a lock,
gevent patches the standard library (as `web.gunicorn_conf` does for the
HTTP front end) and grpcio is put in its gevent mode: the server's pool
"threads" are then greenlets, and a stream waiting on its task's watch
waits in the hub, so a thousand open streams are a thousand greenlets in a
process of a handful of OS threads. Nothing here imports Flask.
"""

from gevent import monkey

monkey.patch_all()

from grpc.experimental import gevent as grpc_gevent  # noqa: E402

grpc_gevent.init_gevent()

from web.grpc_server import main  # noqa: E402

if __name__ == "__main__":
    main()

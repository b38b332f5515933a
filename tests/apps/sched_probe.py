"""Says the scheduling policy (os.sched_getscheduler) of the thread that runs the app and
of a thread the app starts."""

import json
import os
import threading


def application(environ, start_response):
    seen = {}

    def probe():
        seen["app_thread"] = os.sched_getscheduler(0)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    seen["serving_thread"] = os.sched_getscheduler(0)
    body = json.dumps(seen).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]

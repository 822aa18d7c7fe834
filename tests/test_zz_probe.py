import threading


def test_probe():
    assert threading.current_thread().name == "MainThread", threading.current_thread().name

"""Fixtures shared by the end-to-end modules of this directory: one server per module (the command comes
from TF_SERVER_CMD, see serverutil.py), an OpenAI client on it and its model id. A module that needs other
server flags defines its own `server` fixture."""
import pytest

from serverutil import serve


@pytest.fixture(scope="module")
def server():
    yield from serve()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


@pytest.fixture(scope="module")
def model(client):
    return client.models.list().data[0].id

"""WSGI entry point for gunicorn: ``gunicorn api.wsgi:app``. Settings come from the environment."""

from api import create_app

app = create_app()

"""The product routers the app mounts (one line per resource)."""

from fastapi import APIRouter

ROUTERS: list[APIRouter] = []

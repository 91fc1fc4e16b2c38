"""A JavaScript action built on the official ``@actions/artifact`` (the library
``actions/upload-artifact@v4`` and ``download-artifact@v4`` are made of), installed by npm from
the registry and bundled with esbuild into one ``dist/index.js``, as JavaScript actions ship:
built once into a cache, then written into a test repository as ``.github/actions/artifact``.

Inputs: ``mode`` (``upload`` or ``download``), ``name``, ``file`` (upload: a path under the
workspace), ``path`` (download: where to unpack)."""

from __future__ import annotations

from tests.npm_cache import bundled_action

ARTIFACT = "@actions/artifact@2.3.2"

SOURCE = r"""
const path = require('path');
const { DefaultArtifactClient } = require('@actions/artifact');
(async () => {
  const client = new DefaultArtifactClient();
  const name = process.env.INPUT_NAME;
  if (process.env.INPUT_MODE === 'upload') {
    const file = path.resolve(process.env.GITHUB_WORKSPACE, process.env.INPUT_FILE);
    const r = await client.uploadArtifact(name, [file], process.env.GITHUB_WORKSPACE);
    console.log(`uploaded ${name} id=${r.id} size=${r.size}`);
  } else {
    const { artifacts } = await client.listArtifacts();
    console.log(`listed ${artifacts.map(a => a.name).sort().join(',')}`);
    const { artifact } = await client.getArtifact(name);
    const where = path.resolve(process.env.GITHUB_WORKSPACE, process.env.INPUT_PATH);
    const d = await client.downloadArtifact(artifact.id, { path: where });
    console.log(`downloaded ${name} to ${d.downloadPath}`);
  }
})().catch(e => { console.error(`artifact action failed: ${e.message}`); process.exit(1); });
"""

ACTION_YML = """name: artifact
description: upload or download an artifact with @actions/artifact
inputs:
  mode: {required: true}
  name: {required: true}
  file: {required: false}
  path: {required: false, default: '.'}
runs:
  using: node20
  main: dist/index.js
"""


def bundle() -> bytes:
    """The bundled action (built once: npm install, then esbuild)."""
    return bundled_action("artifact-action-2.3.2", SOURCE, [ARTIFACT])


def files() -> dict[str, bytes]:
    """The action's files, by their path in a repository."""
    return {
        ".github/actions/artifact/action.yml": ACTION_YML.encode(),
        ".github/actions/artifact/dist/index.js": bundle(),
    }

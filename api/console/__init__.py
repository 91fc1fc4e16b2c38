"""The web console: server-rendered pages over the API's own code paths (``pages``)."""

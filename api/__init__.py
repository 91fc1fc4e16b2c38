"""FastAPI front end: the composition root of the API process."""

"""The GitHub Actions language, with no Temporal in it: loading workflow files, checking them
against GitHub's schema, expressions, triggers and their filters, step commands, masking. The CI
activities call it; nothing here starts, signals or knows of a workflow."""

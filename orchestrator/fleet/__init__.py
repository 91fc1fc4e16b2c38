"""Providers of GPU workers for the fleet controller: local processes and Kubernetes."""

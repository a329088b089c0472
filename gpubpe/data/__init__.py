"""Data shipped with gpubpe: the embedded demo corpus (see DEMO_LICENSE.md)."""

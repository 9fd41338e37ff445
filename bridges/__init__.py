"""bridges package."""

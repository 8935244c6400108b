"""Asking the host's user: approvers for both protocol eras, and runs parked between the rounds of a call."""

"""Actions: every state change goes through a function here (keyword-only, audited)."""

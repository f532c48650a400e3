"""What-if runs: a recorded thread replayed through the engine under another policy, in a scratch copy."""

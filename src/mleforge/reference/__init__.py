"""Reference solutions of varied strength and the built-in leaderboards they make."""

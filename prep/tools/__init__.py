"""Commands that look at outputs: inspect, bench, and their plots."""

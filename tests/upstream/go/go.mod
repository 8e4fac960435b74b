module belay.test/upstreamgo

go 1.19

require github.com/cornelmarck/durable-execution v0.0.0

// tests/upstream/test_upstream_go.py builds a copy of this module with the replace set to $BELAY_UPSTREAM
// (`go mod edit -replace`); the path here is only the default for building by hand.
replace github.com/cornelmarck/durable-execution => /work/upstream/checkout

// Package engine is mroce's protocol engine, the software implementation
// of docs/spec.md. It is sans-I/O. Packets come in through
// Endpoint.Receive and go out through a link.Port, and time comes from an
// injected clock.Clock. So the same engine runs in virtual time over netem
// and on real sockets. An Endpoint and its connections are driven by one
// goroutine, the clock's loop, so nothing here locks.
//
// The files follow the spec.
//
//	endpoint.go     an endpoint, its connections, decoding and sending (sections 3, 9)
//	handshake.go    CONNECT, ACCEPT and RETRY, address validation, and the values negotiated (section 8)
//	conn.go         a connection and the dispatch of its packets
//	teardown.go     CLOSE, failure and flushing (section 8.5)
//	message.go      posted messages and their completion by stream (section 6.5)
//	dsn.go          the sender's DSN ring (section 6.5)
//	send.go         the sender, pacing, spraying over paths, building data packets
//	sendpath.go     a path's PSN ring and window (sections 6.1, 6.2)
//	dealing.go      which plane each path of a new connection goes on
//	sack.go         applying ACKs and their selective-ack records (sections 5.5, 6.6)
//	recovery.go     tail probes, timeouts and copies at the tail (section 6.6)
//	timer.go        the path, ACK and no-progress timers
//	pathstate.go    what the sender does on path events; pathmgr holds the states (sections 6.3, 6.4)
//	retry.go        NACKs and the retry of refused packets (section 7)
//	recv.go         the receiver's validation and placement (section 9)
//	recvstream.go   messages being received and posted receives (section 6.5)
//	ack.go          the receiver's ACKs, rate hints and probe replies (sections 5.5, 5.10, 6.6)
//	bits.go         the receiver's PSN bitvector and DSN window, a sender's ready set
//	sgl.go          scatter-gather lists of local buffers
//	srq.go          shared receive queues
//	transport.go    what the two modes do differently, and multipath, mroce's own
//	baseline.go     the RoCEv2-like baseline mode (section 10)
//	config.go       settings
//	constants.go    the spec's values and the defaults
//	api.go          work requests, completions and events
//	errors.go       the errors a connection ends with
//	telemetry.go    counters and per-path telemetry
//	trace.go        the optional Tracer of the sender's decisions
//	placeholder.go  placeholder payloads for simulations (section 5.11)
package engine

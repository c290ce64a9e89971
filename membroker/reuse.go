package membroker

import amqp "github.com/rabbitmq/amqp091-go"

// Bounds of the buffers Reuse keeps.
const (
	maxReused     = 1024     // of each: tables, lists, bodies
	maxReusedBody = 64 << 10 // bytes
	smallTable    = 8        // entries a map holds in its first group
)

// Reuse gives back the header table and the body of d, a delivery the
// caller has finished with, for membroker to fill for a later delivery,
// and clears them from d. Nothing may use them afterwards, and d must be as
// membroker delivered it: a table or list the caller put into it would be
// handed to a later delivery too. Reuse is optional and not an AMQP
// operation (it does not advance the model): an in-process consumer that
// handles many deliveries, such as the simulator, saves a few allocations
// per delivery with it.
func (b *Broker) Reuse(d *amqp.Delivery) {
	h, body := d.Headers, d.Body
	d.Headers, d.Body = nil, nil
	b.mu.Lock()
	defer b.mu.Unlock()
	// The x-death records come back too: their tables and lists.
	if xd, ok := h["x-death"].([]any); ok {
		for _, e := range xd {
			if t, ok := e.(amqp.Table); ok {
				if keys, ok := t["routing-keys"].([]any); ok {
					b.reuseSlice(keys)
				}
				b.reuseTable(t)
			}
		}
		b.reuseSlice(xd)
	}
	b.reuseTable(h)
	if cap(body) > 0 && cap(body) <= maxReusedBody && len(b.reusedBodies) < maxReused {
		b.reusedBodies = append(b.reusedBodies, body[:0])
	}
}

// reuseTable keeps h, emptied, for table. A table that ever held more
// than a group's worth keeps the bigger storage: only small ones are kept.
func (b *Broker) reuseTable(h amqp.Table) {
	if h != nil && len(h) <= smallTable && len(b.reusedTables) < maxReused {
		clear(h)
		b.reusedTables = append(b.reusedTables, h)
	}
}

// reuseSlice keeps s, emptied, for anySlice.
func (b *Broker) reuseSlice(s []any) {
	if cap(s) > 0 && cap(s) <= smallTable && len(b.reusedSlices) < maxReused {
		clear(s[:cap(s)])
		b.reusedSlices = append(b.reusedSlices, s[:0])
	}
}

// anySlice returns a list of n nil values, in reused storage if the last
// list given back is big enough.
func (b *Broker) anySlice(n int) []any {
	if k := len(b.reusedSlices); k > 0 && cap(b.reusedSlices[k-1]) >= n {
		s := b.reusedSlices[k-1]
		b.reusedSlices[k-1] = nil
		b.reusedSlices = b.reusedSlices[:k-1]
		return s[:n]
	}
	return make([]any, n)
}

// table returns an empty table for n entries, a reused one if n fits in a
// small one and one is free.
func (b *Broker) table(n int) amqp.Table {
	if k := len(b.reusedTables); k > 0 && n <= smallTable {
		t := b.reusedTables[k-1]
		b.reusedTables[k-1] = nil
		b.reusedTables = b.reusedTables[:k-1]
		return t
	}
	return make(amqp.Table, n)
}

// bodyCopy returns a copy of p in a reused buffer if the last one given
// back is big enough, in a new one otherwise.
func (b *Broker) bodyCopy(p []byte) []byte {
	if len(p) == 0 {
		return nil // as a delivery without a body has always had it
	}
	if k := len(b.reusedBodies); k > 0 && cap(b.reusedBodies[k-1]) >= len(p) {
		buf := b.reusedBodies[k-1]
		b.reusedBodies[k-1] = nil
		b.reusedBodies = b.reusedBodies[:k-1]
		return append(buf, p...)
	}
	return append([]byte(nil), p...)
}

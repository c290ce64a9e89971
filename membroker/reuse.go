package membroker

import amqp "github.com/rabbitmq/amqp091-go"

// Bounds of the buffers Reuse keeps.
const (
	maxReused     = 1024     // tables, and bodies
	maxReusedBody = 64 << 10 // bytes
	smallTable    = 8        // entries a map holds in its first group
)

// Reuse gives back the header table and the body of d, a delivery the
// caller has finished with, for membroker to fill for a later delivery,
// and clears them from d. Nothing may use them afterwards. Reuse is
// optional and not an AMQP operation (it does not advance the model): an
// in-process consumer that handles many deliveries, such as the simulator,
// saves a few allocations per delivery with it.
func (b *Broker) Reuse(d *amqp.Delivery) {
	h, body := d.Headers, d.Body
	d.Headers, d.Body = nil, nil
	b.mu.Lock()
	defer b.mu.Unlock()
	// A table that ever held more than a group's worth keeps the bigger
	// storage: only small ones come back.
	if h != nil && len(h) <= smallTable && len(b.reusedTables) < maxReused {
		clear(h)
		b.reusedTables = append(b.reusedTables, h)
	}
	if cap(body) > 0 && cap(body) <= maxReusedBody && len(b.reusedBodies) < maxReused {
		b.reusedBodies = append(b.reusedBodies, body[:0])
	}
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

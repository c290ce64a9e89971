package main

import (
	"context"
	"fmt"

	"github.com/queuey/queuey/queuey"
)

// enqueueReceipt enqueues an order's receipt with its own options: an ID
// its handler can recognise a second run by, three attempts instead of
// the queue's ten, and a priority ahead of the backlog's 0 (a deferral
// still comes back ahead of it). A VIP's receipt goes to a queue of its
// own.
func enqueueReceipt(ctx context.Context, producer *queuey.Producer, order int, vip bool) (string, error) {
	opts := []queuey.EnqueueOption{
		queuey.WithID(fmt.Sprintf("receipt-%d", order)),
		queuey.WithMaxAttempts(3),
		queuey.WithPriority(5),
	}
	if vip {
		opts = append(opts, queuey.WithQueue("queuey-receipts-vip"))
	}
	return producer.Enqueue(ctx, Receipt{Order: order}, opts...)
}

package rabbitmq

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"
	"github.com/queuey/queuey/membroker"
	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

func TestHoldTTLRoundsUpNeverDown(t *testing.T) {
	ms := time.Millisecond
	max := time.Duration(MaxHoldTTL) * ms
	tests := []struct {
		name        string
		delay, gran time.Duration
		want        int64
		tooLong     bool
	}{
		{"zero delay publishes now", 0, time.Second, 0, false},
		{"negative delay publishes now", -time.Second, time.Second, 0, false},
		{"a nanosecond waits a whole granule", time.Nanosecond, time.Second, 1000, false},
		{"exact multiple kept", time.Second, time.Second, 1000, false},
		{"just over rounds up", time.Second + ms, time.Second, 2000, false},
		{"Retry-After 29.2s shares the 30s queue", 29200 * ms, time.Second, 30000, false},
		{"zero granularity is one millisecond", 1500 * time.Microsecond, 0, 2, false},
		{"granularity under a millisecond counts as one", 1500 * time.Microsecond, time.Nanosecond, 2, false},
		{"sub-millisecond rounds up to whole ms", 10*ms + time.Nanosecond, ms, 11, false},
		{"coarse granularity", 61 * time.Second, 30 * time.Second, 90000, false},
		{"the longest TTL itself", max, ms, MaxHoldTTL, false},
		{"rounding past the limit is refused", max, time.Second, 0, true},
		{"a millisecond over is refused", max + ms, ms, 0, true},
		{"a century is refused", 100 * 365 * 24 * time.Hour, time.Second, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := holdTTL(tc.delay, tc.gran)
			if tc.tooLong {
				if !errors.Is(err, queuey.ErrDelayTooLong) {
					t.Fatalf("holdTTL(%s, %s) = %d, %v; want ErrDelayTooLong", tc.delay, tc.gran, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("holdTTL(%s, %s) = %d, %v; want %d", tc.delay, tc.gran, got, err, tc.want)
			}
			if time.Duration(got)*ms < tc.delay {
				t.Fatalf("released early: %d ms < %s", got, tc.delay)
			}
		})
	}
}

func TestTopologyGranularitiesApplyToTheirKind(t *testing.T) {
	top := Topology{RetryGranularity: 10 * time.Second, DeferredGranularity: time.Second}
	if got, _ := top.RetryTTL(12 * time.Second); got != 20000 {
		t.Errorf("RetryTTL(12s) = %d, want 20000", got)
	}
	if got, _ := top.DeferredTTL(12 * time.Second); got != 12000 {
		t.Errorf("DeferredTTL(12s) = %d, want 12000", got)
	}
	var zero Topology
	if got, _ := zero.RetryTTL(1500 * time.Millisecond); got != 2000 {
		t.Errorf("default RetryTTL(1.5s) = %d, want 2000 (1 s granularity)", got)
	}
}

func TestQueueNames(t *testing.T) {
	var def Topology
	custom := Topology{DeadSuffix: "-dlq", DeferredSuffix: "-hold"}
	tests := []struct{ got, want string }{
		{def.DeadQueue("emails"), "emails.dead"},
		{def.HoldQueue("emails", 30000), "emails.deferred.30000"},
		{custom.DeadQueue("emails"), "emails-dlq"},
		{custom.HoldQueue("emails", 1), "emails-hold.1"},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestHoldQueueArgsArePureFunctionOfName(t *testing.T) {
	want := amqp.Table{
		"x-queue-type":              "classic",
		"x-message-ttl":             int64(30000),
		"x-expires":                 int64(90000),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": "emails",
	}
	if diff := cmp.Diff(want, holdQueueArgs("emails", 30000)); diff != "" {
		t.Fatalf("hold queue args (-want +got):\n%s", diff)
	}
	// The longest hold queue still has an x-expires RabbitMQ accepts.
	if got := holdQueueArgs("q", MaxHoldTTL)["x-expires"]; got != int64(2*MaxHoldTTL) {
		t.Fatalf("x-expires of the longest hold queue = %v", got)
	}
}

// x-expires leaves the message at least a minute of margin, and is twice
// the TTL from a minute up, as seed 000's rule was there.
func TestHoldExpiresLeavesAMinuteOfMargin(t *testing.T) {
	for _, tc := range []struct{ ttl, want int64 }{
		{1, 60_001},
		{1000, 61_000},
		{30_000, 90_000},
		{59_999, 119_999},
		{60_000, 120_000},
		{60_001, 120_002},
		{300_000, 600_000},
		{MaxHoldTTL, 2 * MaxHoldTTL},
	} {
		if got := holdExpires(tc.ttl); got != tc.want {
			t.Errorf("holdExpires(%d) = %d, want %d", tc.ttl, got, tc.want)
		}
		if got := holdExpires(tc.ttl) - tc.ttl; got < holdExpiryMargin.Milliseconds() {
			t.Errorf("holdExpires(%d) leaves %d ms of margin", tc.ttl, got)
		}
	}
}

func TestWorkQueueArgs(t *testing.T) {
	tests := []struct {
		name   string
		quorum bool
		maxPri uint8
		want   amqp.Table
	}{
		{"classic with priorities", false, 10, amqp.Table{"x-max-priority": int32(10)}},
		{"classic without priorities is a plain queue", false, 0, nil},
		{"quorum dead-letters, never x-max-priority", true, 10, amqp.Table{
			"x-queue-type": "quorum", "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "jobs.dead"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, WorkQueueArgs(tc.quorum, tc.maxPri, "jobs.dead")); diff != "" {
				t.Fatalf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestCheckQueueName(t *testing.T) {
	var def Topology
	// The longest name whose warm marker fits: 255 - len(".deferred.warm").
	longest := strings.Repeat("q", 255-len(".deferred.warm"))
	// With classic holds: 255 - len(".deferred.2147483647").
	longestClassic := strings.Repeat("q", 255-len(".deferred.2147483647"))
	classic := Topology{ClassicHolds: true}
	tests := []struct {
		name  string
		top   Topology
		queue string
		want  string // substring of the error; "" for no error
	}{
		{"ordinary", def, "emails", ""},
		{"longest that fits", def, longest, ""},
		{"one byte too long for its warm marker", def, longest + "q", `queue "` + longest + `q": name too long: its warm marker's name would be 256 bytes`},
		{"long dead suffix", Topology{DeadSuffix: strings.Repeat("d", 250)}, "emails", "dead-letter queue name would be 256 bytes"},
		{"longest that fits with classic holds", classic, longestClassic, ""},
		{"too long for its classic hold queues", classic, longestClassic + "q", "its longest hold queue's name would be 256 bytes"},
		{"the ladder's relay queue", def, "queuey.relay", `one of the hold ladder's queues (Topology.Ladder "queuey")`},
		{"a rung of the ladder", def, "queuey.ladder.1000", "one of the hold ladder's queues"},
		{"the ladder's warm marker", def, "queuey.warm", "one of the hold ladder's queues"},
		{"like a rung, but not one", def, "queuey.ladder.x", ""},
		{"a rung of another ladder", def, "other.ladder.1000", ""},
		{"the ladder's name with classic holds", classic, "queuey.relay", ""},
		{"empty", def, "", "queue name is empty"},
		{"reserved prefix", def, "amq.jobs", "prefix amq. is reserved"},
		{"invalid UTF-8", def, "jobs\xff", "not valid UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.top.CheckQueueName(tc.queue)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestTopologyValidate(t *testing.T) {
	tests := []struct {
		name string
		top  Topology
		want string
	}{
		{"defaults", Topology{}, ""},
		{"negative retry granularity", Topology{RetryGranularity: -time.Second}, "RetryGranularity -1s is negative"},
		{"negative deferred granularity", Topology{DeferredGranularity: -1}, "DeferredGranularity -1ns is negative"},
		{"colliding suffixes", Topology{DeadSuffix: ".x", DeferredSuffix: ".x"}, "both \".x\""},
		{"retry granularity at the limit", Topology{RetryGranularity: MaxHoldTTL * time.Millisecond}, ""},
		{"retry granularity over the limit", Topology{RetryGranularity: 30 * 24 * time.Hour}, "RetryGranularity 720h0m0s is over"},
		{"deferred granularity over the limit", Topology{DeferredGranularity: 30 * 24 * time.Hour}, "DeferredGranularity 720h0m0s is over"},
		{"ladder under amq.", Topology{Ladder: "amq.ladder"}, "prefix amq. is reserved"},
		{"ladder not UTF-8", Topology{Ladder: "l\xff"}, "not valid UTF-8"},
		{"longest ladder", Topology{Ladder: strings.Repeat("l", 255-len(".ladder.2147483647"))}, ""},
		{"ladder too long", Topology{Ladder: strings.Repeat("l", 256-len(".ladder.2147483647"))}, "its longest rung's name would be 256 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.top.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestHoldQueueOnMembroker checks the topology against the broker model:
// the arguments are accepted, a re-declaration with the same name is
// equivalent, and a held message is released into the work queue with its
// priority after the TTL, ahead of the backlog.
func TestHoldQueueOnMembroker(t *testing.T) {
	clk := clock.NewMock()
	b := membroker.New(membroker.Config{Clock: clk, Version: membroker.RabbitMQ40})
	conn, _ := b.Dial()
	ch, _ := conn.Channel()
	var top Topology
	if _, err := ch.QueueDeclare("jobs", true, false, false, false, WorkQueueArgs(false, 10, top.DeadQueue("jobs"))); err != nil {
		t.Fatal(err)
	}
	ttl, err := top.DeferredTTL(29200 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	hold := top.HoldQueue("jobs", ttl)
	for range 2 {
		if _, err := ch.QueueDeclare(hold, true, false, false, false, holdQueueArgs("jobs", ttl)); err != nil {
			t.Fatalf("declare %s: %v", hold, err)
		}
	}
	for _, body := range []string{"backlog0", "backlog1"} {
		_ = ch.Publish("", "jobs", false, false, amqp.Publishing{Body: []byte(body)})
	}
	_ = ch.Publish("", hold, false, false, amqp.Publishing{Body: []byte("deferred"), Priority: 10, DeliveryMode: amqp.Persistent})
	clk.Add(29 * time.Second)
	if q, _ := b.Queue("jobs"); q.Ready != 2 {
		t.Fatalf("released early: jobs has %d ready at 29 s", q.Ready)
	}
	clk.Add(time.Second)
	d, ok, err := ch.Get("jobs", true)
	if err != nil || !ok || string(d.Body) != "deferred" || d.Priority != 10 {
		t.Fatalf("first delivery after 30 s = %q priority %d (%v, %v); want the deferred job at priority 10", d.Body, d.Priority, ok, err)
	}
}

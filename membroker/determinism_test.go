package membroker

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/google/go-cmp/cmp"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestModelHasNoGoroutinesOrWallClock enforces DESIGN.md's determinism rules
// on membroker's own source: no go statements, and no direct use of the
// wall clock or of global randomness; time reaches the model only through
// Config.Clock, and randomness only through a generator seeded from
// Config.Timing.Seed.
func TestModelHasNoGoroutinesOrWallClock(t *testing.T) {
	forbidden := map[string]map[string]bool{
		"time":      {"Now": true, "Sleep": true, "After": true, "AfterFunc": true, "Tick": true, "NewTimer": true, "NewTicker": true, "Since": true, "Until": true},
		"math/rand": nil, // any use
	}
	// math/rand/v2 only as a seeded generator: its top-level functions
	// draw from a global source seeded at random.
	seededOnly := map[string]bool{"New": true, "NewPCG": true, "Rand": true, "PCG": true}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		imports := map[string]string{} // local name -> path
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			local := filepath.Base(path)
			if path == "math/rand/v2" {
				local = "rand"
			}
			if imp.Name != nil {
				local = imp.Name.Name
			}
			imports[local] = path
			if members, ok := forbidden[path]; ok && members == nil {
				t.Errorf("%s imports %s", fset.Position(imp.Pos()), path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement in the model", fset.Position(x.Pos()))
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok {
					if forbidden[imports[id.Name]][x.Sel.Name] {
						t.Errorf("%s: %s.%s bypasses Config.Clock", fset.Position(x.Pos()), id.Name, x.Sel.Name)
					}
					if imports[id.Name] == "math/rand/v2" && !seededOnly[x.Sel.Name] {
						t.Errorf("%s: %s.%s draws from the global source, not Config.Timing.Seed", fset.Position(x.Pos()), id.Name, x.Sel.Name)
					}
				}
			}
			return true
		})
	}
	if checked < 5 {
		t.Fatalf("checked only %d files: is the test running in the package directory?", checked)
	}
}

// TestSameCallsSameResults runs one scenario touching most of the model
// (priorities, TTL expiry, dead-lettering, quorum returns and the 2:1
// counter, consumers and round robin, confirms, returns, channel close,
// queue expiry) twice, on fresh brokers, and requires byte-identical traces.
func TestSameCallsSameResults(t *testing.T) {
	for _, v := range []Version{RabbitMQ40, RabbitMQ43} {
		t.Run(v.String(), func(t *testing.T) {
			first, second := replayScenario(t, v), replayScenario(t, v)
			if first != second {
				t.Fatalf("two runs differ:\n%s", cmp.Diff(first, second))
			}
			if len(first) < 2000 {
				t.Fatalf("trace suspiciously short (%d bytes):\n%s", len(first), first)
			}
		})
	}
}

func replayScenario(t *testing.T, v Version) string {
	clk := clock.NewMock()
	clk.Set(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	b := New(Config{Clock: clk, Version: v})
	var out strings.Builder
	logf := func(format string, a ...any) { fmt.Fprintf(&out, format+"\n", a...) }
	conn, _ := b.Dial()
	ch, _ := conn.Channel()
	_ = ch.Confirm(false)
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 1000))
	returns := ch.NotifyReturn(make(chan amqp.Return, 10))

	must := func(_ amqp.Queue, err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ch.QueueDeclare("work", true, false, false, false, amqp.Table{"x-max-priority": 10}))
	must(ch.QueueDeclare("dead", true, false, false, false, nil))
	must(ch.QueueDeclare("qq", true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-delivery-limit": 3, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dead"}))
	for _, ttl := range []int{300, 1000, 5000} {
		must(ch.QueueDeclare(fmt.Sprintf("hold.%d", ttl), true, false, false, false, amqp.Table{
			"x-message-ttl": ttl, "x-expires": 2 * ttl, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": "work"}))
	}
	pub := func(q, body string, prio uint8, exp string) {
		_ = ch.Publish("", q, true, false, amqp.Publishing{Body: []byte(body), Priority: prio, Expiration: exp,
			MessageId: body, Headers: amqp.Table{"n": len(body)}})
	}
	for i := range 20 {
		pub("work", fmt.Sprintf("w%d", i), uint8(i%12), "")
		pub("qq", fmt.Sprintf("q%d", i), uint8(i%7), "")
		pub(fmt.Sprintf("hold.%d", []int{300, 1000, 5000}[i%3]), fmt.Sprintf("h%d", i), 10, "")
	}
	pub("nowhere", "lost", 0, "")
	show := func(d amqp.Delivery) string {
		return fmt.Sprintf("%s tag=%d redelivered=%t prio=%d rk=%s headers=%v count=%d ctag=%s",
			d.Body, d.DeliveryTag, d.Redelivered, d.Priority, d.RoutingKey, d.Headers, d.MessageCount, d.ConsumerTag)
	}
	// Quorum: get, return, reject to the limit.
	for i := range 12 {
		d, ok, err := ch.Get("qq", false)
		logf("qq get %t %v %s", ok, err, show(d))
		if ok {
			if i%3 == 0 {
				_ = d.Ack(false)
			} else {
				_ = d.Reject(true)
			}
		}
	}
	// Consumers with prefetch on the work queue, on two channels.
	ch2, _ := conn.Channel()
	_ = ch2.Qos(3, 0, false)
	_ = ch.Qos(2, 0, false)
	c1, _ := ch.Consume("work", "", false, false, false, false, nil)
	c2, _ := ch2.Consume("work", "", false, false, false, false, nil)
	for step := range 30 {
		clk.Add(137 * time.Millisecond)
		for _, c := range []<-chan amqp.Delivery{c1, c2} {
			select {
			case d := <-c:
				logf("t=%s %s", clk.Now().Format(time.StampMilli), show(d))
				if step%4 == 0 {
					_ = d.Nack(false, true)
				} else {
					_ = d.Ack(false)
				}
			default:
			}
		}
		if step == 17 {
			_ = ch2.Close()
		}
		for _, q := range b.Queues() {
			logf("  %s ready=%d unacked=%d consumers=%v", q.Name, q.Ready, q.Unacked, q.Consumers)
		}
	}
	clk.Add(20 * time.Second) // idle hold queues expire
	for _, q := range b.Queues() {
		logf("end %s ready=%d unacked=%d", q.Name, q.Ready, q.Unacked)
	}
	for {
		d, ok, _ := ch.Get("dead", true)
		if !ok {
			break
		}
		logf("dead %s", show(d))
	}
	_ = ch.Close()
	for c := range confirms {
		logf("confirm %d %t", c.DeliveryTag, c.Ack)
	}
	for r := range returns {
		logf("return %d %s %s %s", r.ReplyCode, r.ReplyText, r.RoutingKey, r.Body)
	}
	return out.String()
}

// TestNoSourceFileIsSkipped guards the source scan above against a
// directory layout change.
func TestNoSourceFileIsSkipped(t *testing.T) {
	if _, err := os.Stat("broker.go"); err != nil {
		t.Fatal("the determinism scan must run in the membroker directory")
	}
}

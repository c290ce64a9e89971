package rabbitmq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuey/queuey/queuey"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestLiveClusterLadderFootprint measures what the default topology's
// queues cost a three-node cluster (docs/performance.md, "The ladder on
// three nodes"): it declares quorum work queues with the defaults in steps
// (QUEUEY_FOOTPRINT, cumulative totals such as "1,10,100"), holds a job for
// each (which, after the warm-up, declares the warm markers), and after
// each step reports the quorum queues on the cluster, each node's memory as
// rabbitmqctl status gives it, the three nodes' CPU over 30 s with no
// traffic (what the quorum queues' Raft groups cost at rest), and a kill
// -9 of node 3 followed by its
// start: the time its start took, and the time until every quorum queue
// had all three members online again. It deletes its queues at the end.
// It needs AMQP_CLUSTER_URLS and QUEUEY_RABBITMQ_SCRIPT, as the cluster
// check does, and QUEUEY_FOOTPRINT; it takes minutes, so CI does not run
// it.
func TestLiveClusterLadderFootprint(t *testing.T) {
	urls := strings.Split(os.Getenv("AMQP_CLUSTER_URLS"), ",")
	steps := os.Getenv("QUEUEY_FOOTPRINT")
	if urls[0] == "" || os.Getenv("QUEUEY_RABBITMQ_SCRIPT") == "" || steps == "" {
		t.Skip("AMQP_CLUSTER_URLS, QUEUEY_RABBITMQ_SCRIPT or QUEUEY_FOOTPRINT not set: skipping the footprint measurement")
	}
	conn, err := amqp.Dial(urls[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	prefix := "queuey-footprint-" + hex.EncodeToString(rnd[:]) + "-"
	// A ladder of its own, so that what it counts and deletes is its own.
	b, err := New(Channels(conn.Channel), Options{Topology: Topology{Ladder: prefix + "ladder"}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var names []string
	defer func() {
		// Every queue of ours, ladder and all, whatever step failed.
		ch, err := conn.Channel()
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		defer ch.Close()
		top := b.Topology()
		for _, q := range names {
			for _, name := range []string{q, top.DeadQueue(q), top.WarmQueue(q)} {
				if _, err := ch.QueueDelete(name, false, false, false); err != nil {
					t.Logf("cleanup: deleting %s: %v", name, err)
					return
				}
			}
		}
		if len(names) > 0 {
			for _, name := range top.LadderQueues() {
				if _, err := ch.QueueDelete(name, false, false, false); err != nil {
					t.Logf("cleanup: deleting %s: %v", name, err)
					return
				}
			}
		}
	}()
	report := func(label string) {
		mem := make([]string, 3)
		for n := range 3 {
			mem[n] = clusterMemory(t, n+1)
		}
		t.Logf("RESULT %s: %d quorum queues on the cluster; memory per node (erlang total / rss): %s; idle CPU of the three nodes: %s",
			label, quorumOnline(t, 0), strings.Join(mem, ", "), idleCPU(t, 30*time.Second))
	}
	time.Sleep(10 * time.Second)
	report("0 work queues")
	for _, s := range strings.Split(steps, ",") {
		total, err := strconv.Atoi(s)
		if err != nil || total <= len(names) {
			t.Fatalf("QUEUEY_FOOTPRINT: %q is not a growing list of totals", steps)
		}
		start := time.Now()
		first := len(names)
		for len(names) < total {
			q := fmt.Sprintf("%s%03d", prefix, len(names))
			names = append(names, q)
			if err := b.Declare(context.Background(), queuey.QueueConfig{Name: q, Type: queuey.Quorum}); err != nil {
				t.Fatal(err)
			}
		}
		declared := time.Since(start)
		// A hold for each new queue, once the warm-up is over, declares its
		// warm marker (and the ladder's): the queues a deployment has once
		// it has held a job.
		for _, q := range names[first:] {
			if err := b.Publish(context.Background(), testJob(q, "warm-"+q, 0), time.Second, queuey.HoldDeferred); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(15 * time.Second) // the new members settle
		report(fmt.Sprintf("%d work queues (declared in %s)", total, declared.Round(time.Millisecond)))

		// A kill -9 of node 3, which the client is not on, and its start.
		if err := command("QUEUEY_RABBITMQ_SCRIPT", "cluster", "kill", "3"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		start = time.Now()
		if err := command("QUEUEY_RABBITMQ_SCRIPT", "cluster", "start-node", "3"); err != nil {
			t.Fatal(err)
		}
		booted := time.Since(start)
		want := quorumOnline(t, 0)
		deadline := time.Now().Add(10 * time.Minute)
		for quorumOnline(t, 3) < want {
			if time.Now().After(deadline) {
				t.Fatalf("after 10 minutes, %d of %d quorum queues have three members online", quorumOnline(t, 3), want)
			}
			time.Sleep(2 * time.Second) // each listing boots an Erlang VM for the command line: not too often
		}
		t.Logf("RESULT %d work queues: node 3 killed and started: booted in %s, every quorum queue's three members online after %s",
			total, booted.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	}
}

// clusterCtl runs rabbitmqctl against cluster node n through the script
// and returns its output.
func clusterCtl(t *testing.T, n int, args ...string) []byte {
	t.Helper()
	out, err := clusterCtlErr(n, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func clusterCtlErr(n int, args ...string) ([]byte, error) {
	cmd := envCommand("QUEUEY_RABBITMQ_SCRIPT", append([]string{"cluster", "ctl", strconv.Itoa(n)}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return out, nil
}

// clusterMemory is node n's memory, as rabbitmqctl status reports it: the
// Erlang VM's total and the operating system's resident set.
func clusterMemory(t *testing.T, n int) string {
	var st struct {
		Memory struct {
			Total struct {
				Erlang int64 `json:"erlang"`
				RSS    int64 `json:"rss"`
			} `json:"total"`
		} `json:"memory"`
	}
	if err := json.Unmarshal(clusterCtl(t, n, "status", "--formatter", "json"), &st); err != nil {
		t.Fatalf("status of node %d: %v", n, err)
	}
	return fmt.Sprintf("node %d %d/%d MB", n, st.Memory.Total.Erlang>>20, st.Memory.Total.RSS>>20)
}

// quorumOnline counts the cluster's quorum queues with at least online
// members online. Each node lists its own (--local): a listing of the
// whole cluster from one node has the other nodes answer the command
// line's own Erlang node, which the script's loopback-only distribution
// does not let them reach, and it hangs for its minute. A node that does
// not answer (the one being restarted) is skipped.
func quorumOnline(t *testing.T, online int) int {
	seen := map[string]int{}
	for n := 1; n <= 3; n++ {
		out, err := clusterCtlErr(n, "list_queues", "name", "type", "online", "--local", "--formatter", "json")
		if err != nil {
			continue
		}
		var qs []struct {
			Name   string   `json:"name"`
			Type   string   `json:"type"`
			Online []string `json:"online"`
		}
		if err := json.Unmarshal(out, &qs); err != nil {
			t.Fatalf("list_queues on node %d: %v", n, err)
		}
		for _, q := range qs {
			if q.Type == "quorum" {
				seen[q.Name] = max(seen[q.Name], len(q.Online))
			}
		}
	}
	n := 0
	for _, c := range seen {
		if c >= online {
			n++
		}
	}
	return n
}

// idleCPU is the CPU the cluster's three Erlang VMs use over d, as a share
// of one core, read from /proc: the beam processes whose environment names
// a cluster node (RABBITMQ_NODENAME=rabbit-N@localhost).
func idleCPU(t *testing.T, d time.Duration) string {
	ticks := func() (total int64) {
		procs, _ := os.ReadDir("/proc")
		for _, p := range procs {
			if _, err := strconv.Atoi(p.Name()); err != nil {
				continue
			}
			env, err := os.ReadFile("/proc/" + p.Name() + "/environ")
			if err != nil || !strings.Contains(string(env), "RABBITMQ_NODENAME=rabbit-") {
				continue
			}
			if comm, _ := os.ReadFile("/proc/" + p.Name() + "/comm"); !strings.HasPrefix(string(comm), "beam") {
				continue
			}
			stat, err := os.ReadFile("/proc/" + p.Name() + "/stat")
			if err != nil {
				continue
			}
			// utime and stime: fields 14 and 15, after the command's parenthesis.
			f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			total += u + s
		}
		return total
	}
	before := ticks()
	time.Sleep(d)
	used := float64(ticks()-before) / 100 // clock ticks of 10 ms
	return fmt.Sprintf("%.1f %% of a core", 100*used/d.Seconds())
}

// The workload: arrival processes, the jobs they enqueue through the
// producer, and what each handler run does (its outcome, drawn from the
// seed).

package sim

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/queuey/queuey/queuey"
	"github.com/queuey/queuey/rabbitmq"
	amqp "github.com/rabbitmq/amqp091-go"
)

type arrivalState struct {
	r      *runner
	q      *simQueue
	a      Arrival
	stream uint64
	k      uint64 // arrivals so far
	order  []int  // replay: jobs by arrival time
}

func (r *runner) scheduleArrival(q *simQueue, st *arrivalState) {
	a := st.a
	var at time.Duration
	switch a.Process {
	case ArrivalConstant:
		at = a.Start.D() + time.Duration(float64(st.k)*float64(time.Second)/a.Rate)
	case ArrivalPoisson:
		if st.k == 0 {
			at = a.Start.D()
		}
		gap := time.Duration(-mathLog1m(r.draw(st.stream, st.k, streamArrival)) / a.Rate * float64(time.Second))
		if st.k == 0 {
			at += gap
		} else {
			at = r.now() + gap
		}
	case ArrivalBurst:
		at = a.Start.D() + time.Duration(st.k)*a.Every.D()
	case ArrivalReplay:
		if st.order == nil {
			st.order = sortedReplay(a.Jobs)
		}
		if st.k >= uint64(len(st.order)) {
			return
		}
		at = a.Jobs[st.order[st.k]].At.D()
	}
	if at >= a.End.D() || at >= r.s.Duration.D() {
		return
	}
	st.r, st.q = r, q
	r.clk.afterFire(at-r.now(), st)
}

// fire is the arrival process's next arrival (or burst).
func (st *arrivalState) fire() {
	r, q, a := st.r, st.q, st.a
	k := st.k
	st.k++
	switch a.Process {
	case ArrivalBurst:
		for range a.Size {
			r.arrive(q, nil)
		}
	case ArrivalReplay:
		r.arrive(q, &a.Jobs[st.order[k]])
	default:
		r.arrive(q, nil)
	}
	r.scheduleArrival(q, st)
}

// simJob is the payload of every simulated job.
type simJob struct {
	queue string
	N     uint64 `json:"n"`
}

func (j simJob) Kind() string { return "sim" }

func (j simJob) Queue() string { return j.queue }

func (r *runner) arrive(q *simQueue, rj *ReplayJob) {
	r.nextJob++
	n := r.nextJob
	r.res.Jobs.Arrived++
	if rj == nil && r.draw(n, 0, streamMalformed) < q.spec.Outcome.Malformed {
		body := []byte("not a queuey envelope #" + strconv.FormatUint(n, 10))
		q.malformed[n] = body
		r.res.Jobs.Malformed++
		r.emit(Event{Kind: EvMalformed, Job: n, Queue: q.spec.Name, Worker: -1})
		if err := r.admin.Publish("", q.spec.Name, false, false, amqp.Publishing{MessageId: "m" + strconv.FormatUint(n, 10), Body: body, DeliveryMode: amqp.Persistent}); err != nil {
			r.failf("publishing a malformed body: %v", err)
		}
		return
	}
	j := r.newJob()
	j.n, j.q, j.replay, j.state, j.enqueued = n, q, rj, "arriving", r.now()
	j.poison = rj == nil && r.draw(n, 0, streamPoison) < q.spec.Outcome.Poison
	if j.poison {
		r.res.Jobs.Poison++
	}
	r.jobs.put(n, j)
	j.expect = append(j.expect, expectation{attempt: 1, notBefore: r.now()})
	r.emit(Event{Kind: EvArrive, Job: n, Queue: q.spec.Name, Worker: -1})
	if r.producerDown {
		// Enqueue waits for the connection: the job goes out when the
		// producer is back.
		r.waiting = append(r.waiting, n)
		return
	}
	r.enqueue(q, n)
}

// enqueue publishes job n through the producer.
func (r *runner) enqueue(q *simQueue, n uint64) {
	r.enqueuing = n
	r.jobArgs = simJob{queue: q.spec.Name, N: n} // by pointer: no copy put in an interface
	_, err := r.producer.Enqueue(r.bg, &r.jobArgs)
	if wait, ok := r.warmingUp(err); ok {
		// A young quorum work queue: Enqueue would wait for the warm-up
		// (rabbitmq.Topology.HoldWarmup). Send it then, or when the
		// producer is back.
		if r.warming == nil {
			r.warming = map[uint64]struct{}{}
		}
		r.warming[n] = struct{}{}
		r.clk.AfterFunc(wait, func() {
			delete(r.warming, n)
			if r.producerDown {
				r.waiting = append(r.waiting, n)
				return
			}
			r.enqueue(q, n)
		})
		return
	}
	if err != nil {
		r.failf("enqueue job %d: %v", n, err)
	}
}

// connectProducer connects the producer: a backend on a connection of its
// own, and a Producer on it, which declares the queues.
func (r *runner) connectProducer() error {
	conn, err := r.broker.Dial()
	if err != nil {
		return fmt.Errorf("sim: producer connection: %w", err)
	}
	r.producerConn = conn
	if r.producerBack, err = rabbitmq.New(r.channels(conn), r.backendOptions(conn)); err != nil {
		return fmt.Errorf("sim: producer backend: %w", err)
	}
	r.producer, err = queuey.NewProducer(r.bg, r.producerBack, r.configs, queuey.ProducerConfig{
		Clock: r.clk,
		NewID: func() string {
			var buf [24]byte
			return string(strconv.AppendUint(append(buf[:0], 'j'), r.enqueuing, 10))
		},
	})
	if err != nil {
		return fmt.Errorf("sim: declaring the queues: %w", err)
	}
	r.producerDown = false
	return nil
}

// outcome is what one handler run does.
type outcome struct {
	result   error
	label    string
	duration time.Duration
	crash    bool
}

var errRetryable = errors.New("simulated retryable failure")

func (r *runner) outcomeOf(j *job, run int) outcome {
	o := j.q.spec.Outcome
	n, k := j.n, uint64(run)
	dur := o.Handler.draw(r.draw(n, k, streamHandler))
	retryAfter := func() time.Duration { return o.RetryAfter.draw(r.draw(n, k, streamRetryAfter)) }
	if j.poison {
		return outcome{label: "crash (poison)", duration: dur, crash: true}
	}
	if j.replay != nil {
		rj := j.replay
		label := "ok"
		if len(rj.Outcomes) > 0 {
			label = rj.Outcomes[min(run, len(rj.Outcomes)-1)]
		}
		if rj.Handler > 0 {
			dur = rj.Handler.D()
		}
		switch label {
		case "retry":
			return outcome{result: errRetryable, label: "retry", duration: dur}
		case "fatal":
			return outcome{result: queuey.Fatal(errors.New("simulated fatal failure")), label: "fatal", duration: dur}
		case "defer":
			d := rj.RetryAfter.D()
			if d == 0 {
				d = retryAfter()
			}
			return outcome{result: queuey.Defer(d, "rate limited"), label: "defer " + d.String(), duration: dur}
		case "crash":
			return outcome{label: "crash", duration: dur, crash: true}
		}
		return outcome{label: "ok", duration: dur}
	}
	u := r.draw(n, k, streamResult)
	if u < o.RateLimited {
		d := retryAfter()
		return outcome{result: queuey.Defer(d, "rate limited"), label: "defer " + d.String(), duration: dur}
	}
	if o.Correlation == PerJob {
		u = o.RateLimited + r.draw(n, 0, streamJobResult)*(1-o.RateLimited)
	}
	switch {
	case u < o.RateLimited+o.Retryable:
		return outcome{result: errRetryable, label: "retry", duration: dur}
	case u < o.RateLimited+o.Retryable+o.Fatal:
		return outcome{result: queuey.Fatal(errors.New("simulated fatal failure")), label: "fatal", duration: dur}
	}
	return outcome{label: "ok", duration: dur}
}

// sortedReplay returns the indexes of jobs in arrival order (stable).
func sortedReplay(jobs []ReplayJob) []int {
	order := make([]int, len(jobs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return jobs[order[a]].At < jobs[order[b]].At })
	return order
}

package delivery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/hookd/hookd/internal/store"
)

// QueueDeliver is the River queue deliveries run on.
const QueueDeliver = "deliver"

// maxRiverAttempts bounds River's own attempt counter. The worker ends a
// series itself when the retry schedule (at most 50 steps) is exhausted, so
// River never discards a delivery job.
const maxRiverAttempts = 100

// DeliverArgs are the arguments of one delivery job: everything the worker
// needs without a database read when the payload is small enough to ride
// along.
type DeliverArgs struct {
	DeliveryID string `json:"delivery_id"`
	MessageID  string `json:"message_id"`
	EndpointID string `json:"endpoint_id"`
	EventType  string `json:"event_type"`
	// Series is the delivery's attempt series; a manual retry starts the next.
	Series int `json:"series"`
	// AttemptOffset is the number of attempts made in earlier series, so
	// attempt numbers keep counting up across them.
	AttemptOffset int `json:"attempt_offset,omitempty"`
	// ScheduleOffset is the number of attempts already made in this series
	// (by an earlier job of a delivery that was parked or held and then
	// released), so the retry schedule goes on where it was.
	ScheduleOffset int `json:"schedule_offset,omitempty"`
	// Payload is the message body, carried by jobs queued before payloads
	// moved out of the job (a string, not raw JSON, so River's jsonb could
	// not reformat it). New jobs leave it empty: the worker loads the
	// payload by message id, batched and cached (see payloads), which keeps
	// River's job rows and their GIN-indexed args small.
	Payload string `json:"payload,omitempty"`
	// Trace is the trace context of the message's commit (W3C traceparent
	// and tracestate), so each attempt's span joins the trace that began
	// with the API request. Absent when the API traces nothing.
	Trace map[string]string `json:"trace,omitempty"`
	// NotBefore is when the attempt may start, on the database clock: set
	// on a FIFO head's retry, queued as a new job the moment the attempt
	// before it failed.
	NotBefore *time.Time `json:"not_before,omitempty"`
}

// Kind names the job kind.
func (DeliverArgs) Kind() string { return "deliver" }

// InsertOpts puts deliveries on their own queue.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueDeliver, MaxAttempts: maxRiverAttempts}
}

// MessageJobMaxEndpoints is the most deliveries one message job is given:
// a wider fan-out is split into jobs of at most this many, so a job's
// arguments stay small (River writes its row three times) and its
// attempts in flight are bounded (WorkerConfig.MaxPerJob).
const MessageJobMaxEndpoints = 50

// MessageArgs are the arguments of a message job: the first attempt of
// each of a message's deliveries, made side by side by one job, so River's
// writes of a job (its insert, its fetch, its completion) are shared by
// the message's fan-out. A delivery that needs a later attempt gets a
// job of its own (DeliverArgs): a retry queued by the ledger with the
// attempt's record, a wait handed off by the message worker.
//
// The arguments are versioned like migrations (V): a job keeps its kind
// across versions, so every dispatcher knows it (River's rescuer discards
// a job of a kind its process does not know), and a dispatcher given a
// version newer than it knows leaves the job for one that can
// (MessageWorker.Work), never completing it with nothing sent.
//
//   - 0: {"deliveries": [{"id", "endpoint_id"}]}, each delivery's id given;
//   - 1: {"endpoints": [...]}, ids from store.DeliveryID;
//   - 2: version 1 with "v": 2 written.
type MessageArgs struct {
	// V is the arguments' version; absent in versions 0 and 1.
	V         int    `json:"v,omitempty"`
	MessageID string `json:"message_id"`
	EventType string `json:"event_type"`
	// Endpoints are the endpoints of the message's deliveries that the
	// job owns, each in its first attempt series with no attempt made.
	// A delivery's id follows from its message's and its endpoint's
	// (store.DeliveryID): River writes a job's row three times, and the
	// ids would double it.
	Endpoints []string `json:"endpoints,omitempty"`
	// Deliveries are version 0's deliveries, each with its id.
	Deliveries []MessageDelivery `json:"deliveries,omitempty"`
	// Trace is the message's trace context, as DeliverArgs.Trace.
	Trace map[string]string `json:"trace,omitempty"`
}

// MessageDelivery is one delivery of a version 0 message job.
type MessageDelivery struct {
	DeliveryID string `json:"id"`
	EndpointID string `json:"endpoint_id"`
}

// MessageArgsVersion is the version of the message jobs this dispatcher
// queues, and the newest it runs.
const MessageArgsVersion = 2

// runnable reports whether this version can run the job: a version it
// knows, naming at least one delivery.
func (a MessageArgs) runnable() bool {
	return a.V <= MessageArgsVersion && len(a.Endpoints)+len(a.Deliveries) > 0
}

// deliveries are the DeliverArgs of the job's deliveries, in order.
func (a MessageArgs) deliveries() []DeliverArgs {
	out := make([]DeliverArgs, 0, len(a.Endpoints)+len(a.Deliveries))
	for _, d := range a.Deliveries {
		out = append(out, DeliverArgs{DeliveryID: d.DeliveryID, MessageID: a.MessageID, EndpointID: d.EndpointID,
			EventType: a.EventType, Series: 1, Trace: a.Trace})
	}
	for _, endpointID := range a.Endpoints {
		out = append(out, a.delivery(endpointID))
	}
	return out
}

// endpointIDs are the endpoints of the job's deliveries.
func (a MessageArgs) endpointIDs() []string {
	ids := slices.Clone(a.Endpoints)
	for _, d := range a.Deliveries {
		ids = append(ids, d.EndpointID)
	}
	return ids
}

// Kind names the job kind.
func (MessageArgs) Kind() string { return "deliver_message" }

// InsertOpts puts message jobs on the deliveries' queue.
func (MessageArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueDeliver, MaxAttempts: maxRiverAttempts}
}

// delivery is the DeliverArgs of the job's delivery to an endpoint.
func (a MessageArgs) delivery(endpointID string) DeliverArgs {
	return DeliverArgs{DeliveryID: store.DeliveryID(a.MessageID, endpointID), MessageID: a.MessageID, EndpointID: endpointID,
		EventType: a.EventType, Series: 1, Trace: a.Trace}
}

// DefaultNotifyInterval is the least time between an inserting process's
// notifications that jobs are queued. A job inserted meanwhile waits for
// the next one (or a dispatcher's poll), so it bounds a quiet queue's wait
// before the fetch; each costs one statement in the inserting transaction.
const DefaultNotifyInterval = 20 * time.Millisecond

// Enqueuer inserts delivery jobs with River in the caller's transaction.
type Enqueuer struct {
	Client *river.Client[pgx.Tx]
}

var _ store.Enqueuer = (*Enqueuer)(nil)

// EnqueueTx inserts the deliveries' jobs and returns each delivery's job
// id in order: one message job (MessageArgs) for the deliveries of one
// message that may share it (QueuedDelivery.Shared), when there are at
// least two, and one job per delivery for the rest.
func (e *Enqueuer) EnqueueTx(ctx context.Context, tx pgx.Tx, deliveries []store.QueuedDelivery) ([]int64, error) {
	if e.Client == nil {
		return nil, errors.New("insert jobs: no River client yet")
	}
	// job[i] is the index in params of delivery i's job.
	job := make([]int, len(deliveries))
	// group[i] lists the deliveries sharing delivery i's message job: its
	// message's shared ones, in chunks of MessageJobMaxEndpoints.
	group := make([][]int, len(deliveries))
	shared := make(map[string][]int)
	for i, d := range deliveries {
		if d.Shared {
			shared[d.MessageID] = append(shared[d.MessageID], i)
		}
	}
	for _, all := range shared {
		for c := range slices.Chunk(all, MessageJobMaxEndpoints) {
			for _, k := range c {
				group[k] = c
			}
		}
	}
	params := make([]river.InsertManyParams, 0, len(deliveries))
	for i, d := range deliveries {
		if group := group[i]; len(group) > 1 {
			if group[0] != i {
				job[i] = job[group[0]]
				continue
			}
			args := MessageArgs{V: MessageArgsVersion, MessageID: d.MessageID, EventType: d.EventType, Trace: d.Trace,
				Endpoints: make([]string, len(group))}
			for j, k := range group {
				args.Endpoints[j] = deliveries[k].EndpointID
			}
			job[i] = len(params)
			params = append(params, river.InsertManyParams{Args: args})
			continue
		}
		args := DeliverArgs{
			DeliveryID:     d.ID,
			MessageID:      d.MessageID,
			EndpointID:     d.EndpointID,
			EventType:      d.EventType,
			Series:         d.Series,
			AttemptOffset:  d.AttemptCount,
			ScheduleOffset: d.AttemptCount - d.SeriesBase,
			Trace:          d.Trace,
			NotBefore:      d.NotBefore,
		}
		var opts *river.InsertOpts
		if d.ScheduledAt != nil || d.Unsettled {
			opts = &river.InsertOpts{}
			if d.ScheduledAt != nil {
				opts.ScheduledAt = *d.ScheduledAt
			}
			if d.Unsettled {
				opts.Metadata = []byte(`{"` + metaUnsettled + `":true}`)
			}
		}
		job[i] = len(params)
		params = append(params, river.InsertManyParams{Args: args, InsertOpts: opts})
	}
	res, err := e.Client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("insert jobs: %w", err)
	}
	ids := make([]int64, len(deliveries))
	for i := range deliveries {
		ids[i] = res[job[i]].Job.ID
	}
	return ids, nil
}

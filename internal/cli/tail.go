package cli

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/spf13/cobra"

	hookd "github.com/hookd/hookd/sdk/go"
	"github.com/hookd/hookd/sdk/go/api"
)

// openStatuses are the statuses a delivery leaves: tail keeps reading a
// delivery until it reaches another.
const openStatuses = "pending,delivering,waiting,held"

func isFinal(s api.DeliveryStatus) bool {
	return s == "delivered" || s == "failed" || s == "expired"
}

// deliverySource is what tail reads deliveries with: the SDK's
// Deliveries service.
type deliverySource interface {
	All(ctx context.Context, filter *hookd.DeliveryFilter) iter.Seq2[hookd.Delivery, error]
	Get(ctx context.Context, id string) (*hookd.Delivery, error)
}

// messageSource finds a message's event type, for --event-type.
type messageSource interface {
	Get(ctx context.Context, id string) (*hookd.Message, error)
}

// follower follows the deliveries a filter selects from the API's paged
// lists, and reports each change of one's status, attempts or series once.
//
// Each poll reads (1) every delivery still open since the start, (2)
// every delivery created within the last window, whatever its status, so
// a delivery committed late or gone final between two polls is seen, and
// (3) each delivery followed as open that neither list returned (it went
// final since). A delivery's state only moves forward: an answer older
// than the one printed (updated_at) is ignored, so nothing is printed
// twice.
type follower struct {
	deliveries deliverySource
	messages   messageSource
	filter     hookd.DeliveryFilter // endpoint and tenant; Since is the start
	statuses   map[api.DeliveryStatus]bool
	eventType  string
	window     time.Duration
	now        func() time.Time
	emit       func(hookd.Delivery) error

	seen       map[string]hookd.Delivery // the last state printed (or skipped by the filters)
	open       map[string]bool
	eventTypes map[string]string // message id -> event type
}

func (f *follower) init() {
	f.seen = map[string]hookd.Delivery{}
	f.open = map[string]bool{}
	f.eventTypes = map[string]string{}
}

// poll reads the lists once and reports what changed.
func (f *follower) poll(ctx context.Context) error {
	touched := map[string]bool{}
	openFilter := f.filter
	openFilter.Status = hookd.Ptr(openStatuses)
	openFilter.Limit = hookd.Ptr(250)
	if err := f.scan(ctx, &openFilter, touched); err != nil {
		return err
	}
	recent := f.filter
	recent.Limit = hookd.Ptr(250)
	if from := f.now().Add(-f.window); recent.Since == nil || from.After(*recent.Since) {
		recent.Since = &from
	}
	if err := f.scan(ctx, &recent, touched); err != nil {
		return err
	}
	for id := range f.open {
		if touched[id] {
			continue
		}
		d, err := f.deliveries.Get(ctx, id)
		if err != nil {
			return fmt.Errorf("read %s: %w", id, err)
		}
		if err := f.update(ctx, *d); err != nil {
			return err
		}
	}
	return nil
}

func (f *follower) scan(ctx context.Context, filter *hookd.DeliveryFilter, touched map[string]bool) error {
	for d, err := range f.deliveries.All(ctx, filter) {
		if err != nil {
			return fmt.Errorf("list deliveries: %w", err)
		}
		touched[d.ID] = true
		if err := f.update(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// update records d and reports it when it changed.
func (f *follower) update(ctx context.Context, d hookd.Delivery) error {
	prev, ok := f.seen[d.ID]
	if ok {
		if d.UpdatedAt.Before(prev.UpdatedAt) {
			return nil // an older read than the one reported
		}
		if d.Status == prev.Status && d.AttemptCount == prev.AttemptCount && d.Series == prev.Series {
			return nil
		}
	}
	f.seen[d.ID] = d
	if isFinal(d.Status) {
		delete(f.open, d.ID)
	} else {
		f.open[d.ID] = true
	}
	if len(f.statuses) > 0 && !f.statuses[d.Status] {
		return nil
	}
	if f.eventType != "" {
		et, ok := f.eventTypes[d.MessageID]
		if !ok {
			m, err := f.messages.Get(ctx, d.MessageID)
			if err != nil {
				return fmt.Errorf("read %s: %w", d.MessageID, err)
			}
			et = m.EventType
			f.eventTypes[d.MessageID] = et
		}
		if et != f.eventType {
			return nil
		}
	}
	return f.emit(d)
}

// run polls every interval until ctx ends.
func (f *follower) run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := f.poll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (a *app) tailCommand() *cobra.Command {
	var f deliveryFilter
	var eventType, since string
	var interval, window time.Duration
	c := &cobra.Command{
		Use:   "tail",
		Short: "Follow deliveries live: each change of status or attempts, until interrupted",
		Long: `tail prints a line for each delivery created since it started (or since
--since) whenever its status, attempts or series changes, until
interrupted. It reads the API's paged lists every --interval; deliveries
committed up to --window late are still seen. With --json each line is the
delivery as the API answers it.`,
		Example: "  hookd tail --tenant acme --status failed\n  hookd tail --endpoint ep_01J... --json",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 || window <= 0 {
				return usagef("--interval and --window must be positive")
			}
			start := a.env.Now()
			if since != "" {
				t, err := parseTime("since", since, start)
				if err != nil {
					return err
				}
				start = t
			}
			statuses := map[api.DeliveryStatus]bool{}
			for _, s := range strings.Split(f.status, ",") {
				if s = strings.TrimSpace(s); s != "" {
					st := api.DeliveryStatus(s)
					if !st.Valid() {
						return usagef("--status %q is not a delivery status", s)
					}
					statuses[st] = true
				}
			}
			client, err := a.api()
			if err != nil {
				return err
			}
			p := a.printer()
			fl := &follower{
				deliveries: client.Deliveries, messages: client.Messages,
				filter:   hookd.DeliveryFilter{EndpointID: optString(f.endpoint), TenantID: optString(f.tenant), MessageID: optString(f.message), Since: &start},
				statuses: statuses, eventType: eventType, window: window, now: a.env.Now,
				emit: func(d hookd.Delivery) error { return p.deliveryLine(d) },
			}
			fl.init()
			return fl.run(cmd.Context(), interval)
		},
	}
	f.add(c, false)
	c.Flags().StringVar(&eventType, "event-type", "", "only deliveries of messages of this event type")
	c.Flags().StringVar(&since, "since", "", "follow deliveries created since this time (default: now)")
	c.Flags().DurationVar(&interval, "interval", time.Second, "how often the lists are read")
	c.Flags().DurationVar(&window, "window", time.Minute, "how late a delivery may be committed and still be seen")
	return c
}

// deliveryLine prints one delivery as a line: JSON, or its fields.
func (p *printer) deliveryLine(d hookd.Delivery) error {
	if p.json {
		return p.writeJSONLine(d)
	}
	_, err := fmt.Fprintf(p.out, "%s  %-10s  %s  attempts=%d  code=%s  endpoint=%s  message=%s  %s\n",
		fmtTime(d.UpdatedAt), d.Status, d.ID, d.AttemptCount, oneLine(fmtInt(d.LastStatusCode)), d.EndpointID, d.MessageID, fmtStr(d.LastError))
	return err
}

-- On-demand tuning passes, queued for the fleet's tuning leader: the api
-- records a request and answers at once, and the leader runs the requests
-- one at a time, never the api. A new, small table: nothing on a live
-- table is locked or rewritten.

CREATE TABLE class_tune_requests (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    class        text COLLATE "C" NOT NULL REFERENCES traffic_classes (name) ON DELETE CASCADE,
    -- The range of the log the pass reads, [since, until).
    since        timestamptz NOT NULL,
    until        timestamptz NOT NULL,
    status       text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'done', 'failed')),
    error        text NOT NULL DEFAULT '',
    requested_at timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    finished_at  timestamptz
);

-- At most one request of a class waits or runs at a time.
CREATE UNIQUE INDEX class_tune_requests_pending_idx ON class_tune_requests (class) WHERE status IN ('queued', 'running');
CREATE INDEX class_tune_requests_class_idx ON class_tune_requests (class, id);

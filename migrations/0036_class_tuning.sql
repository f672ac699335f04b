-- Automatic tuning of traffic classes: each class's latest recommendation
-- (what the last pass measured, replayed and concluded, and its shadow
-- while it runs beside the live config), and the history of every tuned
-- change with its figures and evidence. Both tables are new and small (a
-- row per class, a row per change): nothing on a live table is rewritten.

CREATE TABLE class_recommendations (
    class        text COLLATE "C" PRIMARY KEY REFERENCES traffic_classes (name) ON DELETE CASCADE,
    status       text NOT NULL CHECK (status IN ('kept', 'proposed', 'shadowing', 'applied', 'rejected')),
    -- The recommendation as internal/tuning encodes it: current and
    -- proposed configs, their figures, the evidence, the reasons and the
    -- shadow's figures.
    body         jsonb NOT NULL,
    -- The shadow's range while the status is shadowing (and after).
    shadow_since timestamptz,
    shadow_until timestamptz,
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE class_tunings (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    class       text COLLATE "C" NOT NULL,
    at          timestamptz NOT NULL DEFAULT now(),
    -- Who applied it: the dispatcher that applied a shadowed proposal, or
    -- "admin" for a proposal applied through the API.
    actor       text NOT NULL,
    old_config  jsonb NOT NULL,
    new_config  jsonb NOT NULL,
    -- The replayed figures of both configs, the evidence window and the
    -- shadow's live figures.
    figures     jsonb NOT NULL,
    evidence    jsonb NOT NULL,
    reasons     jsonb NOT NULL DEFAULT '[]'
);

CREATE INDEX class_tunings_class_idx ON class_tunings (class, id);

-- hookd:no-transaction
-- The run fence (internal/store/run_fence.go) moves into River's job
-- table: a run's outcome, which carries its run's fetch time in its
-- metadata (hookd_run), is written only while the row is running that
-- same fetch. The dispatcher checked that in a transaction of its own
-- around River's write (BEGIN, a locking read, the write, COMMIT: four
-- statements a completion, the fleet's completions growing with its size
-- as each dispatcher's batches shrink); checked by the row's trigger
-- under the write's own row lock, a completion is River's one statement.
--
-- Two updates are told apart by the mark:
--   * a fetch (a row made running) drops the mark a previous run left,
--     so a running row carries none;
--   * an update that brings a mark other than the row's is a run's
--     outcome: it is kept only if the row is running and was fetched at
--     the mark's time. Otherwise the row is left as it is (the trigger
--     returns NULL) and River's statement returns it unchanged, as it
--     returns a row no longer running.
-- Every other update (River's rescuer, hookd's rescue of a gone
-- dispatcher's jobs, a cancel) brings no new mark and is not touched.
-- A repeated write of an outcome already written (River's completer
-- retrying a batch whose commit it did not see) brings the mark the row
-- holds: River's own statement then changes only the metadata of a row
-- no longer running, and a row running again carries no mark to match.
-- hookd:step
CREATE OR REPLACE FUNCTION hookd_run_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state <> 'running' AND NEW.state = 'running' THEN
        NEW.metadata := NEW.metadata - 'hookd_run';
        RETURN NEW;
    END IF;
    IF OLD.state = 'running' AND OLD.attempted_at = (NEW.metadata ->> 'hookd_run')::timestamptz THEN
        RETURN NEW;
    END IF;
    RETURN NULL;
END
$$;
-- A trigger on a table in use waits for the transactions using it and
-- then holds its lock for an instant.
-- hookd:brief-lock
CREATE OR REPLACE TRIGGER hookd_run_fence BEFORE UPDATE ON river_job
FOR EACH ROW
WHEN (NEW.metadata ? 'hookd_run' AND (
    NEW.metadata -> 'hookd_run' IS DISTINCT FROM OLD.metadata -> 'hookd_run'
    OR (OLD.state <> 'running' AND NEW.state = 'running')))
EXECUTE FUNCTION hookd_run_fence();

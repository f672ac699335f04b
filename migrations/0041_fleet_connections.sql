-- Each dispatcher registers, with its heartbeat, the most connections it
-- may open to the database (its pool, the ledger's, the listener's), so
-- the fleet's total is checked against the server's max_connections: a
-- dispatcher whose start would take the fleet past it refuses to start,
-- and the dispatchers export the total (hookd_fleet_db_connections).
--
-- A column with a constant default: a catalogue change, no rewrite, a
-- brief ACCESS EXCLUSIVE lock on a table of one row per dispatcher. A
-- dispatcher of the previous version leaves it 0 (not counted).
ALTER TABLE hookd_dispatchers ADD COLUMN db_connections integer NOT NULL DEFAULT 0;

-- probe.sql - the statement every chaos worker runs: chaos_probe(ms). Loaded by run.sh.
-- It writes its own start and end to the server log, so that the checker reads the concurrency
-- the server saw from the log alone. At its start it takes a session advisory lock (class 29, key
-- its backend pid) and logs "chaos_start n=N", N the granted locks of class 29 counted by the
-- server's lock table (itself included): the most at once, taken at each start, counts a statement
-- that runs on after its client is gone (the lock is the backend's, not the client's), and
-- xact=T, its transaction's start (epoch seconds): the instant its permit was taken, for a
-- statement inside BEGIN .. COMMIT (a transaction holds one permit from its start), and app=A, its
-- session's application_name (chaos-acquire: a psql that dbthrottle acquire runs). It logs
-- "chaos_end" when it ends or fails in the function; a backend terminated by FATAL logs that line
-- (with its pid) instead, and a session's end its disconnection line (log_disconnections): the
-- checker ends an interval at the first of them.
CREATE OR REPLACE FUNCTION chaos_probe(ms int) RETURNS int LANGUAGE plpgsql AS $$
DECLARE n int;
BEGIN
    PERFORM pg_advisory_lock(29, pg_backend_pid());
    BEGIN
        SELECT count(*) INTO n FROM pg_locks
         WHERE locktype = 'advisory' AND classid = 29 AND objsubid = 2 AND granted;
        RAISE LOG 'chaos_start n=% xact=% app=%', n, extract(epoch FROM transaction_timestamp()),
            current_setting('application_name');
        PERFORM pg_sleep(ms / 1000.0);
    EXCEPTION WHEN OTHERS OR query_canceled THEN
        RAISE LOG 'chaos_end failed';
        PERFORM pg_advisory_unlock(29, pg_backend_pid());
        RAISE;
    END;
    RAISE LOG 'chaos_end';
    PERFORM pg_advisory_unlock(29, pg_backend_pid());
    RETURN n;
END $$;

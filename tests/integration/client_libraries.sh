# client_libraries.sh - client libraries, unmodified: one grant per transaction, refusals with
# SQLSTATE 53300
it_client_libraries() {
    # (Kept permits off: each command is judged by its grant, and a kept permit's reuse is none.)
    lang_grants() { # lang_grants NAME command...: runs it throttled, prints its grant count
        name=$1
        shift
        rm -f "$work/lang.log"
        throttled DBTHROTTLE_CACHE_PERMITS=off DBTHROTTLE_MAX_QUERIES=2 DBTHROTTLE_LOG=$work/lang.log DBTHROTTLE_LOG_LEVEL=info \
            "$@" >"$work/lang.out" 2>&1 || { info "$name failed: $(cat "$work/lang.out")"; echo -1; return; }
        grep -c 'event=grant' "$work/lang.log"
    }
    # Each runs one transaction of two statements, then one statement on its own: two grants.
    g=$(lang_grants psycopg2 $py -c "
import psycopg2
c = psycopg2.connect('')
cur = c.cursor()
cur.execute('select 1'); cur.execute('select 2'); c.commit()
c.autocommit = True
cur.execute('select 3')")
    check "psycopg2: transaction + statement = 2 grants (saw $g)" [ "$g" = 2 ]
    g=$(lang_grants psycopg3 $py -c "
import psycopg
assert psycopg.pq.__impl__ == 'python'  # libpq through ctypes: dlopen + dlsym
with psycopg.connect('') as c:
    with c.transaction():
        c.execute('select 1'); c.execute('select 2')
    c.autocommit = True
    c.execute('select 3')")
    check "psycopg 3 through ctypes: 2 grants (saw $g)" [ "$g" = 2 ]
    g=$(lang_grants ruby-pg ruby -e '
    require "pg"
    c = PG.connect(host: ENV["PGHOST"], port: ENV["PGPORT"], user: "postgres", dbname: "postgres")
    c.transaction { c.exec("select 1"); c.exec("select 2") }
    c.exec("select 3")')
    check "ruby-pg: 2 grants (saw $g)" [ "$g" = 2 ]
    g=$(lang_grants DBD::Pg perl -MDBI -e '
    my $d = DBI->connect("dbi:Pg:", "", "", {RaiseError => 1, AutoCommit => 1});
    $d->begin_work; $d->do("select 1"); $d->do("select 2"); $d->commit;
    $d->do("select 3");')
    check "Perl DBD::Pg: 2 grants (saw $g)" [ "$g" = 2 ]
    # PHP loads pgsql.so with RTLD_DEEPBIND: covered by the dlopen hook.
    g=$(lang_grants php-pgsql php -r '
    $c = pg_connect("host=" . getenv("PGHOST") . " port=" . getenv("PGPORT") . " user=postgres");
    pg_query($c, "begin"); pg_query($c, "select 1"); pg_query($c, "select 2"); pg_query($c, "commit");
    pg_query($c, "select 3");')
    check "PHP pgsql: 2 grants (saw $g)" [ "$g" = 2 ]

    hold_begin lib_holder DBTHROTTLE_MAX_QUERIES=1
    wait_holders q 1
    out=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_WAIT_TIMEOUT=100ms DBTHROTTLE_LOG_LEVEL=error $py -c "
import psycopg2
c = psycopg2.connect('')
try:
    c.cursor().execute('select 1')
except psycopg2.OperationalError as e:
    print(e.pgcode, str(e).split(':')[0])" 2>&1)
    check "psycopg2 refused: OperationalError, SQLSTATE 53300 ($out)" [ "$out" = "53300 dbthrottle" ]
    out=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_WAIT_TIMEOUT=100ms DBTHROTTLE_LOG_LEVEL=error perl -MDBI -e '
    my $d = DBI->connect("dbi:Pg:", "", "", {PrintError => 0});
    $d->do("select 1") and exit 1; print $d->state, "\n";' 2>&1)
    check "DBD::Pg refused: SQLSTATE 53300 ($out)" [ "$out" = 53300 ]
    out=$(throttled DBTHROTTLE_MAX_QUERIES=1 DBTHROTTLE_WAIT_TIMEOUT=100ms DBTHROTTLE_LOG_LEVEL=error php -r '
    $c = pg_connect("host=" . getenv("PGHOST") . " port=" . getenv("PGPORT") . " user=postgres");
    if (@pg_query($c, "select 1") === false) echo substr(pg_last_error($c), 0, 11);' 2>&1)
    check "PHP refused: pg_query fails with the dbthrottle message ($out)" [ "$out" = "dbthrottle:" ]
    hold_end lib_holder
}

# dbthrottle - build, test, bench, install.
#   make            build/libdbthrottle.so and the dbthrottle command (build/dbthrottle)
#   make test       every test (installs missing Debian packages first when run as root)
#   make bench      benchmarks against a throwaway redis-server
#   make install    PREFIX=/usr/local DESTDIR=

CC      ?= cc
PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
BINDIR  ?= $(PREFIX)/bin
MANDIR  ?= $(PREFIX)/share/man
DOCDIR  ?= $(PREFIX)/share/doc/dbthrottle
BUILD   ?= build

PKG_CONFIG ?= pkg-config
HIREDIS_CFLAGS := $(shell $(PKG_CONFIG) --cflags hiredis 2>/dev/null)

# hiredis is linked statically and its symbols hidden (--exclude-libs), so a host program that
# uses another hiredis version never has its calls bound to ours, nor ours to its.
HIREDIS_A := $(shell $(CC) -print-file-name=libhiredis.a)

WARN    := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2 -Wvla
CFLAGS  ?= -O2 -g -gdwarf-4
LIBPQ_CFLAGS := $(shell $(PKG_CONFIG) --cflags libpq 2>/dev/null || echo -I/usr/include/postgresql)
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) -fPIC -fvisibility=hidden -pthread \
              -Ipreload -I$(BUILD)/gen $(HIREDIS_CFLAGS) $(LIBPQ_CFLAGS) $(EXTRA_CFLAGS)
LDLIBS_LIB := $(HIREDIS_A) -ldl -pthread

LIB_SRCS := $(sort $(wildcard preload/*.c))
LIB_OBJS := $(LIB_SRCS:preload/%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/scripts.o
# The interposer proper (hooks and what only they use) stays out of the test binaries: a test
# linked with our dlsym or PQexec would test the hooks by accident, and sanitizers call dlsym
# before anything is set up.
HOOK_SRCS := $(wildcard preload/hooks_*.c) preload/lib.c preload/throttle.c preload/real.c \
             preload/conn_registry.c
CORE_SRCS := $(filter-out $(HOOK_SRCS),$(LIB_SRCS))
CORE_OBJS := $(CORE_SRCS:preload/%.c=$(BUILD)/obj/%.o) $(BUILD)/obj/scripts.o
LUA_SRCS := $(sort $(wildcard lua/*.lua))

UNIT_SRCS := $(sort $(wildcard tests/unit/*.c))
SEM_SRCS  := $(sort $(wildcard tests/sem/*.c))
SUPPORT_SRCS := $(sort $(wildcard tests/support/*.c))
CRITERION_LIBS := -lcriterion

.PHONY: all test test-unit test-sem test-integration test-faults test-faults-cache test-cli fuzz soak bench bench-scale bench-peers demo install uninstall clean deps format format-check \
        check-asan check-tsan check-valgrind

all: $(BUILD)/libdbthrottle.so $(BUILD)/dbthrottle

$(BUILD)/gen/scripts.c $(BUILD)/gen/scripts.h: $(LUA_SRCS) tools/embed-lua.sh
	@mkdir -p $(BUILD)/gen
	sh tools/embed-lua.sh $(BUILD)/gen $(LUA_SRCS)

$(BUILD)/obj/%.o: preload/%.c $(wildcard preload/*.h) $(BUILD)/gen/scripts.h
	@mkdir -p $(BUILD)/obj
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/obj/scripts.o: $(BUILD)/gen/scripts.c
	@mkdir -p $(BUILD)/obj
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(BUILD)/libdbthrottle.so: $(LIB_OBJS) preload/exports.map
	$(CC) -shared -o $@ $(LIB_OBJS) -Wl,--version-script=preload/exports.map \
	    -Wl,--exclude-libs,ALL -Wl,-Bsymbolic-functions -Wl,-z,defs -Wl,-z,now $(LDLIBS_LIB)

$(BUILD)/libdbthrottle-core.a: $(CORE_OBJS)
	rm -f $@ && ar rcs $@ $(CORE_OBJS)

TEST_CFLAGS := $(filter-out -fvisibility=hidden,$(ALL_CFLAGS)) -Itests/support

# The operator's command: the library's own configuration, Redis and script code (the core
# archive), plus cli/. It finds the library beside itself, in ../lib, or in LIBDIR.
CLI_SRCS := $(sort $(wildcard cli/*.c))
$(BUILD)/dbthrottle: $(CLI_SRCS) cli/cli.h $(BUILD)/libdbthrottle-core.a
	$(CC) $(filter-out -fPIC -fvisibility=hidden,$(ALL_CFLAGS)) -Icli -DDBT_LIBDIR='"$(LIBDIR)"' \
	    -o $@ $(CLI_SRCS) $(BUILD)/libdbthrottle-core.a $(LDLIBS_LIB)

$(BUILD)/tests/unit: $(UNIT_SRCS) $(SUPPORT_SRCS) $(BUILD)/libdbthrottle-core.a
	@mkdir -p $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -o $@ $(UNIT_SRCS) $(SUPPORT_SRCS) $(BUILD)/libdbthrottle-core.a \
	    $(CRITERION_LIBS) $(LDLIBS_LIB)

$(BUILD)/tests/sem: $(SEM_SRCS) $(SUPPORT_SRCS) $(BUILD)/libdbthrottle-core.a
	@mkdir -p $(BUILD)/tests
	$(CC) $(TEST_CFLAGS) -o $@ $(SEM_SRCS) $(SUPPORT_SRCS) $(BUILD)/libdbthrottle-core.a \
	    $(CRITERION_LIBS) $(LDLIBS_LIB)

$(BUILD)/bench/sem-bench: bench/sem_bench.c $(SUPPORT_SRCS) $(BUILD)/libdbthrottle-core.a
	@mkdir -p $(BUILD)/bench
	$(CC) $(TEST_CFLAGS) -o $@ bench/sem_bench.c $(SUPPORT_SRCS) $(BUILD)/libdbthrottle-core.a \
	    $(LDLIBS_LIB) -lm

$(BUILD)/bench/scale-bench: bench/scale_bench.c $(SUPPORT_SRCS) $(BUILD)/libdbthrottle-core.a
	@mkdir -p $(BUILD)/bench
	$(CC) $(TEST_CFLAGS) -o $@ bench/scale_bench.c $(SUPPORT_SRCS) $(BUILD)/libdbthrottle-core.a \
	    $(LDLIBS_LIB) -lm

$(BUILD)/bench/dbt-peer-worker: bench/peers/dbt_worker.c $(BUILD)/libdbthrottle-core.a
	@mkdir -p $(BUILD)/bench
	$(CC) $(TEST_CFLAGS) -o $@ bench/peers/dbt_worker.c $(BUILD)/libdbthrottle-core.a $(LDLIBS_LIB)

# The stress run under each checker. The library's objects are rebuilt with the sanitizer in
# a build directory of their own.
STRESS_SRCS := tests/stress/sem_stress.c $(SUPPORT_SRCS)
SAN_SRCS := $(CORE_SRCS) $(BUILD)/gen/scripts.c $(STRESS_SRCS)
SAN_CFLAGS := $(filter-out -fvisibility=hidden -O2,$(ALL_CFLAGS)) -O1 -Itests/support -fno-omit-frame-pointer

$(BUILD)/check/stress-asan: $(SAN_SRCS) $(wildcard preload/*.h) $(BUILD)/gen/scripts.h
	@mkdir -p $(BUILD)/check
	clang $(SAN_CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all -o $@ \
	    $(SAN_SRCS) $(HIREDIS_A) -ldl

$(BUILD)/check/stress-tsan: $(SAN_SRCS) $(wildcard preload/*.h) $(BUILD)/gen/scripts.h
	@mkdir -p $(BUILD)/check
	clang $(SAN_CFLAGS) -fsanitize=thread -o $@ $(SAN_SRCS) $(HIREDIS_A) -ldl

$(BUILD)/check/stress: $(SAN_SRCS) $(wildcard preload/*.h) $(BUILD)/gen/scripts.h
	@mkdir -p $(BUILD)/check
	$(CC) $(SAN_CFLAGS) -o $@ $(SAN_SRCS) $(HIREDIS_A) -ldl

# The semaphore suite (Criterion) under ASan+UBSan. (Criterion itself does not run under TSan:
# the stress program and the preloaded library cover threads there.)
$(BUILD)/check/sem-asan: $(CORE_SRCS) $(SEM_SRCS) $(SUPPORT_SRCS) $(wildcard preload/*.h) $(BUILD)/gen/scripts.h
	@mkdir -p $(BUILD)/check
	clang $(SAN_CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=all -o $@ \
	    $(CORE_SRCS) $(BUILD)/gen/scripts.c $(SEM_SRCS) $(SUPPORT_SRCS) $(CRITERION_LIBS) $(HIREDIS_A) -ldl

# The preloaded library itself, built with each sanitizer, for libpq workers of the fault suite.
SO_SAN_CFLAGS := $(filter-out -O2,$(ALL_CFLAGS)) -O1 -fno-omit-frame-pointer
SO_SAN_SRCS := $(LIB_SRCS) $(BUILD)/gen/scripts.c
# The dlsym and dlopen hooks (and the lookups they make) run before a sanitizer's runtime is
# initialised, since its interceptors call dlsym: they are built without instrumentation.
SO_RAW_SRCS := preload/hooks_dlsym.c preload/hooks_dlopen.c preload/real.c
$(BUILD)/check/dlhooks.o: $(SO_RAW_SRCS) $(wildcard preload/*.h)
	@mkdir -p $(BUILD)/check
	for f in $(SO_RAW_SRCS); do clang $(SO_SAN_CFLAGS) -c -o $(BUILD)/check/raw-$$(basename $$f .c).o $$f || exit 1; done
	ld -r -o $@ $(patsubst preload/%.c,$(BUILD)/check/raw-%.o,$(SO_RAW_SRCS))
$(BUILD)/check/libdbthrottle-%.so: $(SO_SAN_SRCS) $(wildcard preload/*.h) $(BUILD)/gen/scripts.h preload/exports.map $(BUILD)/check/dlhooks.o
	@mkdir -p $(BUILD)/check
	clang $(SO_SAN_CFLAGS) -shared -fsanitize=$(if $(filter asan,$*),address$(comma)undefined -fno-sanitize-recover=all -shared-libsan,thread) \
	    -o $@ $(filter-out $(SO_RAW_SRCS),$(SO_SAN_SRCS)) $(BUILD)/check/dlhooks.o \
	    -Wl,--version-script=preload/exports.map -Wl,--exclude-libs,ALL \
	    -Wl,-Bsymbolic-functions $(HIREDIS_A) -ldl -pthread

$(BUILD)/check/fault_worker-tsan: tests/faults/fault_worker.c
	@mkdir -p $(BUILD)/check
	clang -std=c11 -D_GNU_SOURCE $(WARN) -O1 -g -fsanitize=thread $(LIBPQ_CFLAGS) -o $@ $< -lpq -pthread

comma := ,
ASAN_RT = $(shell clang -print-file-name=libclang_rt.asan-x86_64.so)
SANLOG = $(BUILD)/check/san-$@

check-asan: $(BUILD)/check/stress-asan $(BUILD)/check/sem-asan $(BUILD)/check/libdbthrottle-asan.so all $(BUILD)/tests/fault_worker
	ASAN_OPTIONS=detect_leaks=1 $(BUILD)/check/stress-asan
	ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=tests/lsan.supp $(BUILD)/check/sem-asan --jobs 2
	rm -f $(SANLOG)*
	DBT_LIB=$(CURDIR)/$(BUILD)/check/libdbthrottle-asan.so DBT_PRELOAD_FIRST=$(ASAN_RT) \
	    DBT_SANITIZER_LOGS=$(CURDIR)/$(SANLOG) \
	    ASAN_OPTIONS=detect_leaks=0:log_path=$(CURDIR)/$(SANLOG) \
	    UBSAN_OPTIONS=print_stacktrace=1:log_path=$(CURDIR)/$(SANLOG) FAULT_EXIT_NOW=1 sh tests/faults/run.sh 3 4 7 10
	DBT_LIB=$(CURDIR)/$(BUILD)/check/libdbthrottle-asan.so DBT_PRELOAD_FIRST=$(ASAN_RT) \
	    DBT_SANITIZER_LOGS=$(CURDIR)/$(SANLOG) \
	    ASAN_OPTIONS=detect_leaks=0:log_path=$(CURDIR)/$(SANLOG) \
	    UBSAN_OPTIONS=print_stacktrace=1:log_path=$(CURDIR)/$(SANLOG) FAULT_EXIT_NOW=1 \
	    DBTHROTTLE_CACHE_PERMITS=on sh tests/faults/run.sh 3 4 7 10

check-tsan: $(BUILD)/check/stress-tsan $(BUILD)/check/libdbthrottle-tsan.so $(BUILD)/check/fault_worker-tsan all
	TSAN_OPTIONS=halt_on_error=1 $(BUILD)/check/stress-tsan
	rm -f $(SANLOG)*
	DBT_LIB=$(CURDIR)/$(BUILD)/check/libdbthrottle-tsan.so DBT_WORKER=$(CURDIR)/$(BUILD)/check/fault_worker-tsan \
	    DBT_SANITIZER_LOGS=$(CURDIR)/$(SANLOG) TSAN_OPTIONS=log_path=$(CURDIR)/$(SANLOG) \
	    sh tests/faults/run.sh 3 4 7 10
	DBT_LIB=$(CURDIR)/$(BUILD)/check/libdbthrottle-tsan.so DBT_WORKER=$(CURDIR)/$(BUILD)/check/fault_worker-tsan \
	    DBT_SANITIZER_LOGS=$(CURDIR)/$(SANLOG) TSAN_OPTIONS=log_path=$(CURDIR)/$(SANLOG) \
	    DBTHROTTLE_CACHE_PERMITS=on sh tests/faults/run.sh 10

check-valgrind: $(BUILD)/check/stress all $(BUILD)/tests/fault_worker
	valgrind -q --leak-check=full --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=9 $(BUILD)/check/stress
	rm -f $(SANLOG)*
	DBT_WRAP="valgrind -q --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --log-file=$(CURDIR)/$(SANLOG).%p" \
	    DBT_SANITIZER_LOGS=$(CURDIR)/$(SANLOG) sh tests/faults/run.sh 10

deps:
	sh tools/install-deps.sh

test: deps
	$(MAKE) all $(BUILD)/tests/unit $(BUILD)/tests/sem $(BUILD)/tests/fork_client $(BUILD)/tests/pipeline_client \
	    $(BUILD)/tests/libnext_preload.so
	sh tools/check-exports.sh $(BUILD)/libdbthrottle.so
	$(MAKE) format-check
	$(BUILD)/tests/unit --jobs 2
	$(BUILD)/tests/sem --jobs 2
	sh tests/integration/test_interposer.sh
	$(MAKE) test-faults
	$(MAKE) test-faults-cache
	$(MAKE) test-cli
	$(MAKE) check-asan check-tsan check-valgrind
	$(MAKE) fuzz FUZZ_SECONDS=15

test-unit: $(BUILD)/tests/unit
	$(BUILD)/tests/unit

test-sem: $(BUILD)/tests/sem
	$(BUILD)/tests/sem

$(BUILD)/tests/%_client: tests/integration/%_client.c
	@mkdir -p $(BUILD)/tests
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(LIBPQ_CFLAGS) -o $@ $< -lpq

$(BUILD)/tests/fault_worker: tests/faults/fault_worker.c
	@mkdir -p $(BUILD)/tests
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) $(CFLAGS) $(LIBPQ_CFLAGS) -pthread -o $@ $< -lpq

# The same fault suite with permits kept between commands (DBTHROTTLE_CACHE_PERMITS=on): every
# bound on concurrency, recovery and call duration must hold with caching as without.
test-faults-cache: all $(BUILD)/tests/fault_worker
	DBTHROTTLE_CACHE_PERMITS=on sh tests/faults/run.sh $(FAULTS)

# The dbthrottle command against real Redis and PostgreSQL (tests/cli/run.sh).
test-cli: all $(BUILD)/tests/fault_worker
	sh tests/cli/run.sh

# The fault suite (tests/faults/run.sh): crashes, Redis outages, signals, fork, netns. FAULTS=
# "1 3" runs only those cases.
test-faults: all $(BUILD)/tests/fault_worker
	sh tests/faults/run.sh $(FAULTS)

# Ten minutes of load with Redis restarts; RSS and descriptors of a worker must not grow.
soak: all $(BUILD)/tests/fault_worker
	SOAK_SECONDS=$${SOAK_SECONDS:-600} sh tests/soak/run.sh

# libFuzzer over the configuration, value, redaction and key parsers (tests/fuzz/run.sh): 15 s
# a target in make test, longer by hand: make fuzz FUZZ_SECONDS=600.
FUZZ_SECONDS ?= 60
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) sh tests/fuzz/run.sh $(CURDIR)/$(BUILD)/fuzz

$(BUILD)/tests/libnext_preload.so: tests/integration/next_preload.c
	@mkdir -p $(BUILD)/tests
	$(CC) -shared -fPIC $(WARN) $(CFLAGS) -o $@ $< -ldl

test-integration: all $(BUILD)/tests/libnext_preload.so $(BUILD)/tests/fork_client $(BUILD)/tests/pipeline_client
	sh tests/integration/test_interposer.sh

bench: deps all $(BUILD)/bench/sem-bench $(BUILD)/bench/scale-bench
	@command -v pgbouncer >/dev/null || sh tools/install-deps.sh pgbouncer
	$(BUILD)/bench/sem-bench
	$(BUILD)/bench/scale-bench
	sh bench/pg_bench.sh

# dbthrottle beside npm's redis-semaphore, the "Redis in Action" semaphore and Curator on ZooKeeper,
# same parameters, one run (bench/peers/run.sh); then the database level beside PgBouncer.
bench-peers: deps all $(BUILD)/bench/dbt-peer-worker
	@command -v pgbouncer >/dev/null || sh tools/install-deps.sh pgbouncer
	sh bench/peers/run.sh
	sh bench/pg_bench.sh

# How the costs grow with a pool's size (10 to 10 000 waiters), memory, connections per process.
bench-scale: $(BUILD)/bench/scale-bench
	$(BUILD)/bench/scale-bench

demo: deps all
	sh tools/demo.sh

install: $(BUILD)/libdbthrottle.so $(BUILD)/dbthrottle
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(BINDIR) $(DESTDIR)$(DOCDIR) \
	    $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man7
	install -m 0644 $(BUILD)/libdbthrottle.so $(DESTDIR)$(LIBDIR)/libdbthrottle.so
	install -m 0755 $(BUILD)/dbthrottle $(DESTDIR)$(BINDIR)/dbthrottle
	install -m 0644 docs/dbthrottle.1 $(DESTDIR)$(MANDIR)/man1/dbthrottle.1
	install -m 0644 docs/libdbthrottle.7 $(DESTDIR)$(MANDIR)/man7/libdbthrottle.7
	install -m 0644 README.md docs/*.md config/dbthrottle.conf.example $(DESTDIR)$(DOCDIR)/

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libdbthrottle.so $(DESTDIR)$(BINDIR)/dbthrottle \
	    $(DESTDIR)$(MANDIR)/man1/dbthrottle.1 $(DESTDIR)$(MANDIR)/man7/libdbthrottle.7
	rm -rf $(DESTDIR)$(DOCDIR)

format:
	clang-format -i preload/*.c preload/*.h cli/*.c cli/*.h tests/*/*.c tests/*/*.h bench/*.c bench/*/*.c

format-check:
	clang-format --dry-run --Werror preload/*.c preload/*.h cli/*.c cli/*.h tests/*/*.c tests/*/*.h bench/*.c bench/*/*.c

clean:
	rm -rf $(BUILD)

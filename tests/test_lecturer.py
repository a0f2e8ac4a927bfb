"""Only the lecturer changes what every session of a served class sees (issue 49): with a lecturer
password in the server's secrets, a student's session cannot load a pair or measure this machine's
latency profile, and a refused try changes nothing for anyone; the lecturer can after giving the
password; a pair folder outside the allowed roots is refused with one message that names no server
path and does not say whether the path exists; a notice meant for one session ("Measured and
saved...") never shows in another. A lone user (no password configured) keeps every control.
Wrong passwords are counted per client address on the server, so a reload meets the same limit;
a student's page says while the lecturer measures the profile, and once when it switched (issue 61)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("streamlit", reason="the app's packages are not installed (a bare GPU server)")
import test_app  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from taps.pair import PairError  # noqa: E402
from taps.studio.app_state import load_pair_from_source  # noqa: E402
from taps.studio.lecturer import allowed_folder, class_settings  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "correct horse battery staple"

tiny_pair_env = test_app.tiny_pair_env     # the app on the tiny pair with a fixed profile saved (autouse)
fresh_runs = test_app.fresh_runs


@pytest.fixture(autouse=True)
def fresh_sign_in_counts():
    """Every test's apps start with no wrong password counted against their address (the counts are
    the server's: they outlive an app, which is what they are for)."""
    from taps.studio.sign_in import sign_in_guard

    sign_in_guard().forget()
    yield
    sign_in_guard().forget()


# ---------------------------------------------------------------------------- the rules, plain Python
def test_no_password_is_a_lone_users_machine():
    assert not class_settings({}).served and not class_settings(None).served
    assert not class_settings({}).check("")
    settings = class_settings({"lecturer_password": PASSWORD})
    assert settings.served and settings.check(PASSWORD)
    assert not settings.check("") and not settings.check(PASSWORD + " ") and not settings.check(None)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_wrong_passwords_are_counted_per_address_and_the_wait_grows(tmp_path, caplog):
    from taps.studio.sign_in import FIRST_WAIT_S, MAX_TRIES, SignInGuard, standing_text

    clock, checked = Clock(), []
    guard = SignInGuard(tmp_path / "tries.json", clock)

    def check(right: bool):
        return lambda: checked.append(right) or right

    with caplog.at_level("WARNING", logger="taps.studio.sign_in"):
        for n in range(1, MAX_TRIES + 1):
            verdict = guard.attempt("10.0.0.7", check(False))
            assert verdict.checked and not verdict.signed_in and verdict.standing.left == MAX_TRIES - n
        assert verdict.standing.wait_s == FIRST_WAIT_S
        assert standing_text(guard.standing("10.0.0.7")) == "the next try from this address in 30 s"
        refused = guard.attempt("10.0.0.7", check(True))                 # the right one, while it waits
        assert not refused.checked and not refused.signed_in and checked == [False] * MAX_TRIES
    assert sum("refused a lecturer sign-in from 10.0.0.7" in r.getMessage() for r in caplog.records) == 1
    assert sum("wrong lecturer password from 10.0.0.7" in r.getMessage() for r in caplog.records) == MAX_TRIES
    assert guard.standing("10.0.0.8").left == MAX_TRIES                  # another address: its own count
    assert SignInGuard(tmp_path / "tries.json", clock).standing("10.0.0.7") == guard.standing("10.0.0.7")  # a replica
    clock.now += FIRST_WAIT_S
    assert guard.attempt("10.0.0.7", check(False)).standing.wait_s == 2 * FIRST_WAIT_S        # the wait doubles
    clock.now += 2 * FIRST_WAIT_S
    assert guard.attempt("10.0.0.7", check(True)).signed_in                                   # after the wait
    assert guard.standing("10.0.0.7").left == MAX_TRIES                  # a right password clears the count


def test_the_counts_hold_under_threads_and_an_unreadable_file(tmp_path):
    import threading

    from taps.studio.sign_in import MAX_TRIES, SignInGuard

    path = tmp_path / "tries.json"
    guards = [SignInGuard(path), SignInGuard(path)]      # two processes' guards on one file, 8 threads
    threads = [threading.Thread(target=lambda g=g: [g.attempt(f"a{k}", lambda: False) for k in range(3)])
               for g in guards for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [guards[0].standing(f"a{k}").wait_s > 0 for k in range(3)] == [True] * 3       # 8 tries each: all counted
    assert [guards[1].standing(f"a{k}").left for k in range(3)] == [0] * 3
    path.write_text("{not json")
    assert guards[0].standing("a0").left == MAX_TRIES                    # unreadable: afresh, no error


def test_pair_folders_are_read_only_inside_the_allowed_roots(tmp_path, tiny_pair_dir):
    root = tiny_pair_dir.parent
    outside = tmp_path / "secret"
    outside.mkdir()
    (tmp_path / "link").symlink_to(outside)
    roots = (root.resolve(),)
    assert allowed_folder(str(tiny_pair_dir), roots) == tiny_pair_dir.resolve()
    assert allowed_folder(tiny_pair_dir.name, roots) == tiny_pair_dir.resolve()           # a name inside a root
    for text in (str(outside), f"{tiny_pair_dir}/../../{tmp_path.name}/secret", "../secret", "~", "/",
                 str(tmp_path / "link"), str(tmp_path / "missing")):
        assert allowed_folder(text, roots) is None, text


def test_a_refused_folder_gets_one_message_naming_no_server_path(tmp_path, tiny_pair_dir):
    roots = (tiny_pair_dir.parent.resolve(),)
    existing, missing = tmp_path / "ssh", tmp_path / "nothing-here"
    existing.mkdir()
    messages = []
    for text in (str(existing), str(missing), "~/.ssh", "~"):
        with pytest.raises(PairError) as caught:
            load_pair_from_source(text, "cpu", roots)
        messages.append(str(caught.value).replace(text, "TYPED"))
        assert str(Path.home()) not in str(caught.value).replace(text, "") and str(tmp_path) not in \
            str(caught.value).replace(text, "")
    assert len(set(messages)) == 1, messages                  # existing or not, inside home or not: the same words
    assert load_pair_from_source(tiny_pair_dir.name, "cpu", roots).name == "tiny-random"


def test_a_broken_pair_inside_a_root_is_named_as_typed(tmp_path):
    broken = tmp_path / "pairs" / "broken"
    broken.mkdir(parents=True)
    with pytest.raises(PairError) as caught:
        load_pair_from_source("broken", "cpu", ((tmp_path / "pairs").resolve(),))
    assert "broken" in str(caught.value) and str(tmp_path) not in str(caught.value)


# ---------------------------------------------------------------------------- the app (AppTest)
def open_as(page: str | None = "1_Step_through.py", password: str | None = PASSWORD) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    if password:
        at.secrets["lecturer_password"] = password
    at.run()
    if page:
        at.switch_page(f"app_pages/{page}").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def sign_in(at: AppTest, password: str) -> AppTest:
    at.sidebar.text_input(key="lecturer_password_input").set_value(password)
    return at.sidebar.button(key="lecturer_sign_in").click().run()


def sidebar_text(at: AppTest) -> str:
    return " | ".join([c.value for c in at.sidebar.caption] + [s.value for s in at.sidebar.success] +
                      [w.value for w in at.sidebar.warning] + [e.value for e in at.sidebar.error] +
                      [i.value for i in at.sidebar.info])


def test_a_lone_user_keeps_every_control():
    at = open_as(password=None)
    assert not at.sidebar.button(key="profile_measure_button").disabled
    assert not at.sidebar.text_input(key="pair_source_input").disabled
    assert "lecturer_password_input" not in [w.key for w in at.sidebar.text_input]


def test_a_student_cannot_load_a_pair_or_measure_and_a_try_changes_nothing(tiny_pair_dir):
    from taps.studio import speed

    pair = load_pair_from_source(str(tiny_pair_dir), "auto")
    before = speed.measure_job(pair)
    student, other = open_as(), open_as()
    button = student.sidebar.button(key="profile_measure_button")
    assert button.disabled and "Only the lecturer" in sidebar_text(student)
    assert student.sidebar.text_input(key="pair_source_locked").disabled
    assert "pair_source_input" not in [w.key for w in student.sidebar.text_input]       # no box to type a path in
    sign_in(student, "guess")
    assert "not the lecturer's password" in sidebar_text(student)
    assert student.sidebar.button(key="profile_measure_button").disabled
    other.run()
    assert speed.measure_job(pair) is before
    assert other.sidebar.button(key="profile_measure_button").disabled and not other.exception
    assert "not the lecturer's password" not in sidebar_text(other)


def test_wrong_passwords_run_out_and_a_reload_meets_the_same_limit():
    at = open_as()
    sign_in(at, "guess")
    assert "4 tries left from this address" in sidebar_text(at)
    for _ in range(4):
        sign_in(at, "guess")
    sign_in(at, PASSWORD)                                     # the right one, too late for this address
    assert "Too many wrong passwords" in sidebar_text(at) and "the next try from this address in 30 s" in \
        sidebar_text(at)
    assert at.sidebar.button(key="profile_measure_button").disabled
    reloaded = open_as()                                      # the page opened again: a new browser session
    assert "The next try from this address in" in sidebar_text(reloaded)
    sign_in(reloaded, PASSWORD)
    assert "Too many wrong passwords" in sidebar_text(reloaded) and "Signed in" not in sidebar_text(reloaded)
    assert reloaded.sidebar.button(key="profile_measure_button").disabled


def test_the_lecturer_loads_pairs_from_the_allowed_roots_only(tmp_path):
    at = sign_in(open_as(), PASSWORD)
    assert "Signed in as the lecturer" in sidebar_text(at)
    box = at.sidebar.text_input(key="pair_source_input")
    assert not box.disabled and not at.sidebar.button(key="profile_measure_button").disabled
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    box.set_value(str(outside)).run()
    shown = " | ".join(e.value for e in at.sidebar.error)
    assert "neither a pair folder this class server offers" in shown and "still using the previous pair" in shown
    assert str(tmp_path) not in shown.replace(str(outside), "") and str(Path.home()) not in shown.replace(
        str(outside), "")
    assert "Loaded: **tiny-random**" in sidebar_text(at)


@pytest.mark.slow                      # a real measurement of the tiny pair (about 10 s)
def test_the_lecturers_measurement_is_said_to_the_lecturer_alone(tiny_pair_dir):
    with test_app.no_saved_profile(tiny_pair_dir) as pair:
        lecturer = sign_in(open_as(), PASSWORD)
        student = open_as()
        lecturer.sidebar.button(key="profile_measure_button").click().run()
        job = test_app.measured(pair)
        lecturer.run()
        student.run()
        fresh = open_as()
        assert not job.error and "Measured and saved" in sidebar_text(lecturer)
        for other in (student, fresh):
            assert not other.exception
            assert "Measured and saved" not in sidebar_text(other)
            assert "measured by the lecturer" in sidebar_text(other)          # every page sizes from it, and says so


# ---------------------------------------------------------------------------- told what the lecturer measures
def test_what_a_page_is_told_about_the_lecturers_measuring(tmp_path):
    from taps.studio.profile_news import STALE_AFTER_S, Measuring, ProfileNews, class_notice

    news = ProfileNews(tmp_path / "news.json")
    assert news.current("p") is None and class_notice(None, None, "the reference CPU's timings").kind == ""
    news.started("p", now=100.0)
    running = ProfileNews(tmp_path / "news.json").current("p")                    # another replica reads it
    assert running == Measuring("p", 100.0)
    told = class_notice(running, None, "the reference CPU's timings", now=130.0)
    assert told.kind == "running" and "The lecturer is measuring" in told.text and "reference CPU" in told.text
    again = class_notice(running, told.watched, "this machine's previous timings", now=131.0)
    assert again.watched == told.watched                                          # what trees were sized from then
    news.ended("p", now=170.0)
    ended = news.current("p")
    assert ended == Measuring("p", 100.0, 170.0)
    switched = class_notice(ended, told.watched, "this machine's previous timings", now=171.0)
    assert switched.kind == "switched" and "the profile switched" in switched.text
    assert "own timings from now on (until now: the reference CPU's timings)" in switched.text
    assert class_notice(ended, switched.watched, "x", now=172.0).kind == ""         # said once
    assert class_notice(ended, None, "x", now=172.0).kind == ""                     # a page opened after it ended
    news.started("p", now=200.0)
    news.ended("p", error="RuntimeError: busy", now=210.0)
    watched = (200.0, "the reference CPU's timings")
    assert class_notice(news.current("p"), watched, "x", now=211.0).kind == "failed"
    stale = Measuring("q", 100.0)                                                 # its process stopped mid-way
    assert class_notice(stale, (100.0, "y"), "y", now=100.0 + STALE_AFTER_S).kind == "failed"
    assert class_notice(stale, None, "y", now=100.0 + STALE_AFTER_S).kind == ""


def test_a_student_is_told_while_the_lecturer_measures_and_when_the_profile_switched(tiny_pair_dir):
    from taps.profiles import profile_path
    from taps.studio import speed
    from taps.studio.profile_news import profile_news

    where = str(profile_path(load_pair_from_source(str(tiny_pair_dir), "auto")))
    news = profile_news()
    try:
        student = open_as()
        assert "The lecturer is measuring" not in sidebar_text(student)
        news.started(where)                             # the lecturer measures (on another replica: no job here)
        student.run()
        text = sidebar_text(student)
        assert "The lecturer is measuring this machine's latency profile" in text and not student.exception
        assert speed.MEASURE_REASON[1:] not in text and "This machine: measured" not in text
        news.ended(where)
        student.run()
        assert "the profile switched, and trees are sized from this machine's own timings" in sidebar_text(student)
        student.run()
        assert "the profile switched" not in sidebar_text(student)                # said once
        assert "This machine: measured by the lecturer" in sidebar_text(student)
        for other in (open_as(), sign_in(open_as(), PASSWORD)):                   # opened after; the lecturer
            assert "the profile switched" not in sidebar_text(other) and "is measuring" not in sidebar_text(other)
    finally:
        news.path.unlink(missing_ok=True)


# ---------------------------------------------------------------------------- following the lecturer
def test_the_room_is_one_file_every_replica_reads(tmp_path):
    from taps.studio.room import Room

    room = Room(tmp_path / "room.json")
    assert room.current() is None
    assert room.publish({"example": "fib", "round": "2", "presenter": "1"})
    assert not room.publish({"example": "fib", "round": "2"})          # the same view: the lecturer's own
    shown = room.current()                                             # presenter mode is not part of it
    assert shown.params == {"example": "fib", "round": "2"} and shown.seq == 1
    assert Room(tmp_path / "room.json").current() == shown             # another process reads the same
    assert room.publish({"example": "fib", "round": "3"}) and room.current().seq == 2
    (tmp_path / "room.json").write_text("{not json")
    assert Room(tmp_path / "room.json").current() is None              # unreadable: a follower stays put


def test_a_student_who_follows_gets_the_lecturers_round_and_the_others_keep_theirs():
    from taps.studio.room import class_room

    room = class_room()
    room.path.unlink(missing_ok=True)
    lecturer = sign_in(open_as(), PASSWORD)
    for _ in range(3):
        lecturer.button(key="step_btn_step").click().run()
    lecturer_ctrl = lecturer.session_state["step_controller"]
    assert lecturer_ctrl.view == 3 and room.current().params["round"] == "3"
    follower, loner = open_as(), open_as()
    assert loner.session_state["step_controller"].view == 0
    follower.sidebar.toggle(key="follow_lecturer").set_value(True).run()
    ctrl = follower.session_state["step_controller"]
    assert ctrl.view == 3 and ctrl.prompt_text == lecturer_ctrl.prompt_text
    assert ctrl.record() is lecturer_ctrl.record()                     # the lecturer's shared run: decoded once
    lecturer.button(key="step_btn_back").click().run()                # the lecturer goes back a round
    follower.run()
    assert follower.session_state["step_controller"].view == 2 and not follower.exception
    follower.button(key="step_btn_forward").click().run()              # a follower's own move: their page only
    assert follower.session_state["step_controller"].view == 3 and lecturer_ctrl.view == 2
    loner.run()
    assert loner.session_state["step_controller"].view == 0            # not following: untouched
    assert "follow_lecturer" not in [t.key for t in lecturer.sidebar.toggle]   # the lecturer leads

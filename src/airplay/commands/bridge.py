"""``airplay vehicle``: the rehearsal MAVLink vehicle (:mod:`airplay.bridge.vehicle_endpoint`)."""

from __future__ import annotations

import argparse
import logging
import math
import sys
import threading
import time

from airplay import cli_flags


def _floats(text: str, count: int, what: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != count or not all(math.isfinite(v) for v in values):
        raise SystemExit(f"error: {what} must be {count} comma-separated numbers, got {text!r}")
    return values


def _start_pose(args: argparse.Namespace) -> tuple[tuple[float, float, float, float], str]:
    """(x, y, z ground, yaw rad) in map and a description, from --start or --scene/--task."""
    if args.scene is None:
        x, y, z, yaw_deg = _floats(args.start, 4, "--start X,Y,Z,YAW_DEG") if args.start else (0, 0, 0, 0)
        return (x, y, z, math.radians(yaw_deg)), "start"
    from airplay.world import World
    from airplay.tasks.sampler import sample_tasks

    world = World.load(args.scene)
    fly = ""
    if args.setting == "vln":  # the VLN episodes as sim_eval and `airplay launch fly policy:=airvln_r1` derive them
        from airplay.vln.evaluate import vln_scene
        from airplay.vln.options import load_episode_options

        try:
            vcfg, imported = load_episode_options(args.vln_config, args.vln_episodes)
        except (OSError, ValueError) as exc:
            raise SystemExit(f"error: {exc}") from None
        vs = vln_scene(world, args.episodes, args.seed, vcfg, imported)
        tasks = vs.tasks
        fly = " policy:=airvln_r1 vln_backend:=transformers model:=DIR" + "".join(
            f" {k}:={v}" for k, v in (("vln_config", args.vln_config), ("vln_episodes", args.vln_episodes)) if v)
    else:
        tasks = sample_tasks(world.scene, world.grid, args.episodes, args.seed, args.setting, world.protocol)
    if not 0 <= args.task < len(tasks):
        raise SystemExit(f"error: --task {args.task} outside 0..{len(tasks) - 1} (--episodes {args.episodes})")
    task = tasks[args.task]
    x, y, z = (float(v) for v in task.start_position)
    ground = args.ground_z
    goal = ", ".join(f"{v:.2f}" for v in task.goal_position)
    what = "VLN episode" if args.setting == "vln" else "task"
    note = (f"{what} {args.task} of {world.name} (episodes {args.episodes}, seed {args.seed}): "
            f"start ({x:.2f}, {y:.2f}) on the ground z={ground:.2f}, goal ({goal}); fly it with "
            f"`airplay launch fly scene:={args.scene} index:={args.task} episodes:={args.episodes} seed:={args.seed}"
            f"{fly} arm:=true` (the bridge takes off to {z - ground:.2f} m and flies to the start pose; without "
            f"arm:=true it waits for `airplay bridge arm`)")
    if args.setting == "vln":
        note += f"\ninstruction: {vs.episodes[args.task].instruction}"
    return (x, y, ground, float(task.start_yaw)), note


def _autopilot_params(items: list[str] | None) -> dict[str, float]:
    """``--param NAME=VALUE`` options -> {NAME: value}; the vehicle checks names and ranges."""
    out: dict[str, float] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not sep or not name.strip() or not math.isfinite(number):
            raise ValueError(f"--param wants NAME=NUMBER, got {item!r}")
        out[name.strip().upper()] = number
    return out


_PARAMS_HELP = """\
autopilot parameters (--param NAME=VALUE, the real autopilots' names and units):
  px4:
    COM_OF_LOSS_T=1.0   s without a setpoint before the offboard-loss failsafe (also --offboard-loss);
                        OFFBOARD is refused unless a setpoint came this recently
    COM_OBL_RC_ACT=0    what the offboard loss does; the vehicle has no RC, so as on PX4
                        0 Position, 1 Altitude, 2 Manual: land (AUTO.LAND) and disarm on touchdown;
                        3 Return (AUTO.RTL), 4 Land (AUTO.LAND), 5 Hold (AUTO.LOITER)
    MIS_TAKEOFF_ALT=2.5 m, NAV_TAKEOFF height when its altitude is NaN
    NAV_MC_ALT_RAD=0.8  m, altitude acceptance radius: answered to PARAM_REQUEST_READ (the bridge
                        reads it to judge the end of PX4's take-off)
    RTL_RETURN_ALT=60   m above home, the climb of AUTO.RTL
  ardupilot:
    GUID_TIMEOUT=3      s: GUIDED stops and holds when the velocity setpoint is older
    FS_GCS_ENABLE=0     GCS failsafe: 0 off, 5 LAND (also 4, 7), 1 RTL (also 2, 3, 6)
    FS_GCS_TIMEOUT=5    s without a HEARTBEAT from MAV_GCS_SYSID, while armed, before the failsafe
    MAV_GCS_SYSID=255   system id whose HEARTBEATs the failsafe watches (the bridge's: 1 by default)
    RTL_ALT=1500        cm above home, the climb of RTL

Refusals (arming before --ready-after, modes, OFFBOARD without setpoints, take-off while
disarmed) are answered with the autopilot's COMMAND_ACK result and a STATUSTEXT giving the
reason. Position setpoints (SET_POSITION_TARGET_LOCAL_NED, MAV_FRAME_LOCAL_NED, position +
yaw) are flown to and held in OFFBOARD/GUIDED, like velocity setpoints.
"""


def _cmd_vehicle(args: argparse.Namespace) -> int:
    from airplay.bridge.vehicle_endpoint import VehicleEndpoint
    from airplay.sim.dynamics import load_vehicle_params

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s",
                        stream=sys.stderr)
    start, note = _start_pose(args)
    try:
        params = load_vehicle_params(args.vehicle_config)
        vehicle = VehicleEndpoint(args.mavlink, args.flavour, params, start, system=args.system_id,
                                  offboard_loss_s=args.offboard_loss, autopilot_params=_autopilot_params(args.param),
                                  ready_after_s=args.ready_after, gps_loss_after_s=args.gps_loss_after)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"airplay vehicle: {args.flavour} on {args.mavlink} (system {args.system_id}), at "
          f"({start[0]:.2f}, {start[1]:.2f}, {start[2]:.2f}) yaw {math.degrees(start[3]):.0f} deg; "
          f"{note}", flush=True)
    print("parameters: " + " ".join(f"{k}={v:g}" for k, v in vehicle.autopilot_params.items())
          + (f"; ready (arming allowed) after {args.ready_after:g} s" if args.ready_after > 0 else ""), flush=True)
    stop = threading.Event()
    runner = threading.Thread(target=vehicle.run, kwargs={"duration_s": args.duration, "stop": stop}, daemon=True)
    runner.start()
    print(f"{'t s':>7} {'mode':<12} {'armed':<5} {'x':>7} {'y':>7} {'z':>6} {'yaw deg':>7} {'setpoints':>9}",
          flush=True)
    t0 = time.monotonic()
    try:
        while runner.is_alive():
            runner.join(timeout=args.status_every)
            p = vehicle.position
            print(f"{time.monotonic() - t0:7.1f} {vehicle.mode:<12} {str(vehicle.armed):<5} {p[0]:7.2f} {p[1]:7.2f} "
                  f"{p[2]:6.2f} {math.degrees(vehicle.yaw):7.1f} {vehicle.stats['setpoints']:9d}", flush=True)
    except KeyboardInterrupt:
        stop.set()
        runner.join(timeout=2)
    finally:
        vehicle.close()
    return 0


def _cmd_identify(args: argparse.Namespace) -> int:
    """``airplay identify``: fly the excitation on a real (or SITL) autopilot, fit, write the profile."""
    from pathlib import Path

    from airplay.bridge import identify
    from airplay.bridge.flight import FlightController
    from airplay.bridge.flight_config import default_flight_config
    from airplay.bridge.mavlink_link import Autopilot
    from airplay.sim.dynamics import load_vehicle_params

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s",
                        stream=sys.stderr)
    if not args.arm:
        print("error: airplay identify arms the vehicle and flies it for about "
              f"{identify.excitation_duration_s():.0f} s within ~3.5 m of where it stands and up to "
              f"{args.takeoff_height + 1.0:.1f} m up: give --arm to do so (nothing arms without it)", file=sys.stderr)
        return 2
    out = Path(args.out)
    base = load_vehicle_params(args.base)
    fence = {}
    if args.fence_box:
        fence = {"fence_box_xy_m": tuple(_floats(args.fence_box, 4, "--fence-box X0,Y0,X1,Y1"))}
    config = default_flight_config(takeoff_height_m=args.takeoff_height, **fence)
    truth = identify.TruthListener(args.truth) if args.truth else None
    if truth is not None:
        truth.start()
    autopilot = Autopilot(args.connection, clock=time.time).start()
    flight = FlightController(autopilot, config, clock=time.time)
    flight.start()
    flight.request_arm()
    print(f"identify: arming and flying on {args.connection} (take-off {args.takeoff_height:.1f} m, then "
          f"{identify.excitation_duration_s():.0f} s of excitation); Ctrl-C lands", flush=True)
    try:
        rec = identify.fly_excitation(flight, config.supervisor.control_period_s,
                                      progress=lambda f: print(f"identify: excitation {100 * min(f, 1):3.0f} %",
                                                               flush=True))
    except KeyboardInterrupt:
        flight.shutdown()
        flight.close()
        return 130
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        flight.shutdown()
        flight.close()
        return 1
    finally:
        if truth is not None:
            truth.close()
    flavour = autopilot.status.flavour
    flight.close()
    print(f"identify: {len(rec.t)} control periods recorded; fitting", flush=True)
    params, report = identify.fit_profile(rec, base)
    identified = {"autopilot": flavour, "connection": args.connection,
                  "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "excitation_s": identify.excitation_duration_s()}
    if truth is not None and truth.samples:
        import numpy as np

        t, _, _, _, position = rec.arrays()
        samples = np.asarray(truth.samples)
        report["estimate_error"] = identify.estimate_error(t, position, samples[:, 0], samples[:, 1:4], ground_s=2.0)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(identify.profile_text(params, report, identified))
    tmp.replace(out)
    print(f"{'parameter':<36} {'fitted':>9} {'base':>9}")
    for name in ("velocity_time_constant_s", "vertical_velocity_time_constant_s", "yaw_rate_time_constant_s",
                 "max_accel_xy_m_s2", "max_accel_z_m_s2"):
        print(f"{name:<36} {getattr(params, name):9.3f} {getattr(base, name):9.3f}")
    print(f"{'command delay s':<36} {report['command_delay_s']:9.3f}")
    for axis, value in report["rms_error"].items():
        print(f"{'RMS error ' + axis:<36} {value:9.4f} {report['rms_error_of_the_base_model'][axis]:9.4f}")
    if "estimate_error" in report:
        e = report["estimate_error"]
        print(f"estimate against truth: RMS {e['xy_rms_m']:.3f} m horizontal, {e['z_rms_m']:.3f} m vertical "
              f"(p95 {e['xy_p95_m']:.3f}, {e['z_p95_m']:.3f})")
    print(f"profile -> {out}")
    return 0


def register(sub) -> None:
    """Add ``airplay vehicle`` and ``airplay identify`` to the sub-parsers ``sub``."""
    q = sub.add_parser(
        "identify", help="fit airplay's flight model to an autopilot's response (PX4, ArduPilot; SITL or real)",
        description="Arms the vehicle (only with --arm), takes off, and flies through the bridge's flight sequence "
                    "and safety supervisor a fixed excitation: velocity steps forward, sideways, up and down, "
                    "yaw-rate steps and a forward chirp (about 60 s within ~3.5 m of the start), then lands. "
                    "Fits the flight model's velocity and yaw-rate time constants, acceleration limits and the "
                    "command delay to the autopilot's estimated response, and writes a vehicle profile for "
                    "--vehicle (airplay collect, dagger, eval). With --truth (a SITL's true state) it also "
                    "measures the position estimate's error.")
    q.add_argument("--connection", default="udp:127.0.0.1:14540", help="MAVLink connection, as the bridge's")
    q.add_argument("--arm", action="store_true", help="arm and fly (required: nothing arms without it)")
    q.add_argument("--out", required=True, help="the profile to write, e.g. config/vehicles/px4_sih.yaml")
    q.add_argument("--base", default=None, help="vehicle file whose limits are kept (default config/vehicle.yaml)")
    q.add_argument("--takeoff-height", type=float, default=1.5, help="take-off height, m (default 1.5)")
    q.add_argument("--fence-box", default=None, help="X0,Y0,X1,Y1: a geofence, in the autopilot's local ENU m")
    q.add_argument("--truth", default=None, help="the simulator's true state: udpin:127.0.0.1:19410 (PX4 SIH's "
                                                 "HIL_STATE_QUATERNION) or a link carrying ArduPilot's SIM_STATE")
    q.set_defaults(func=_cmd_identify)
    p = sub.add_parser(
        "vehicle", help="a MAVLink vehicle (PX4 or ArduPilot flavour) flown by airplay's dynamics, for rehearsals",
        description="A simulated multirotor that speaks MAVLink 2 like PX4 (OFFBOARD) or ArduCopter (GUIDED): "
                    "heartbeat, arming, take-off, landing, mode changes with COMMAND_ACK, velocity and position "
                    "setpoints, telemetry; and fails as they do: OFFBOARD is refused without a setpoint stream, "
                    "losing the stream triggers PX4's COM_OBL_RC_ACT (by default: land), ArduPilot's GUIDED "
                    "stops after GUID_TIMEOUT and its GCS failsafe lands, arming waits for --ready-after. "
                    "Rehearse with `airplay launch fly`.",
        epilog=_PARAMS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mavlink", default="udp:127.0.0.1:14540",
                   help="where to send (udp:HOST:PORT, as PX4 SITL sends to its offboard port 14540; also "
                        "udpin:/udpout:/tcp:). Default udp:127.0.0.1:14540")
    p.add_argument("--flavour", default="px4", choices=("px4", "ardupilot"))
    p.add_argument("--start", help="X,Y,Z,YAW_DEG: where the vehicle stands, map ENU metres (z: the ground)")
    p.add_argument("--scene", help="scene folder: place the vehicle under the start of a task of this scene")
    p.add_argument("--task", type=int, default=0, help="task index with --scene (default 0)")
    cli_flags.add_episodes(p, help="tasks sampled with --scene, as in airplay eval")
    cli_flags.add_seed(p)
    p.add_argument("--setting", default="pointgoal", choices=("pointgoal", "imagegoal", "goalfree", "vln"),
                   help="the tasks of --scene; vln: the VLN episodes (for `airplay launch fly policy:=airvln_r1`)")
    p.add_argument("--vln-config", default=None, help="with --setting vln: a YAML instead of config/vln.yaml")
    p.add_argument("--vln-episodes", default=None, help="with --setting vln: an episode file instead of sampling")
    p.add_argument("--ground-z", type=float, default=0.0, help="ground height with --scene (map z, default 0)")
    p.add_argument("--param", action="append", metavar="NAME=VALUE",
                   help="an autopilot parameter of the flavour (repeatable; list below), e.g. COM_OBL_RC_ACT=5 "
                        "or FS_GCS_ENABLE=5")
    p.add_argument("--offboard-loss", type=float, default=None, metavar="S",
                   help="px4: seconds without setpoints before the OFFBOARD failsafe, the same as "
                        "--param COM_OF_LOSS_T=S (default 1.0)")
    p.add_argument("--ready-after", type=float, default=0.0, metavar="S",
                   help="seconds from start until the estimator is ready: arming and position modes are refused "
                        "before (PX4: 'Preflight Fail: ekf2 missing data', ArduPilot: 'PreArm: Need Position "
                        "Estimate'), SYS_STATUS shows the pre-arm check unhealthy (default 0: ready at once)")
    p.add_argument("--gps-loss-after", type=float, default=None, metavar="S",
                   help="rehearse a GPS loss: after S seconds of flight GPS_RAW_INT says no fix and the reported "
                        "position drifts from the true one (dead reckoning), as PX4 and ArduPilot report it "
                        "(default: never)")
    p.add_argument("--system-id", type=int, default=1)
    p.add_argument("--vehicle-config", help="vehicle parameters YAML (default config/vehicle.yaml)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds (default: Ctrl-C)")
    p.add_argument("--status-every", type=float, default=2.0, help="seconds between status lines")
    p.set_defaults(func=_cmd_vehicle)

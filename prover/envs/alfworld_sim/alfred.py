"""ALFWorld's rules as data: the facts the default ``alfworld-sim`` rules are built from.

Two kinds of facts, each table naming where it comes from:

* Carried over from the ``alfworld`` package (MIT) that ``plugins/prover-alfworld`` installs;
  ``tests/test_alfworld_sim.py`` compares them with the installed package when it is importable:
  ``CAN_CONTAIN`` is ``alfworld/gen/constants.py`` ``VAL_RECEPTACLE_OBJECTS``; ``HEATABLE``,
  ``COOLABLE``, ``CLEANABLE``, ``TOGGLEABLE``, ``SLICEABLE`` are its ``VAL_ACTION_OBJECTS``;
  ``OPENABLE`` its ``OPENABLE_CLASS_LIST``; ``RECEPTACLE_OBJECTS`` its ``MOVABLE_RECEPTACLES``;
  ``TASK_ROOMS`` its ``GOALS_VALID``. Names are lower-cased, as ALFWorld's text shows them. Sliced
  objects are left out (ALFWorld's loader skips sliced tasks), and so are the movable receptacles as
  holders: the actions of ``alfworld/data/alfred.pddl`` that put an object into another object are
  commented out, so in the text game a bowl, box, cup, mug, pan, plate or pot is only a thing to carry.
* Counted from ALFWorld's shipped games: the 4,026 solvable ``game.tw-pddl`` files of its
  ``json_2.1.1`` release (train, valid_train, valid_seen, valid_unseen; 112 scenes; a scene's kind
  from ``constants.SCENE_TYPE``), read from a public copy of the release (GitHub
  sbhambr1/LLMs_for_Sparse_RL, branch sid/old_expts, environments/alfworld/alfworld/data). These
  are not in the package, so no test can re-count them:
  ``ROOMS``, ``ROOM_OBJECTS``, ``FIXTURE_HOMES``, ``SHARED_LOCATION``, ``TASK_OBJECTS``,
  ``TASK_RECEPTACLES``. Each says how it was counted.
"""

from __future__ import annotations

# -- carried over from alfworld/gen/constants.py ---------------------------------------------------
# VAL_RECEPTACLE_OBJECTS: receptacle type -> the object types it can contain (alfred.pddl's canContain).
CAN_CONTAIN: dict[str, str] = {
    "armchair": "basketball book box cellphone cloth creditcard keychain laptop newspaper pillow "
                "remotecontrol",
    "bathtubbasin": "cloth dishsponge handtowel soapbar",
    "bed": "baseballbat basketball book cellphone laptop newspaper pillow tennisracket",
    "cabinet": "book bowl box candle cd cloth cup dishsponge glassbottle handtowel kettle ladle mug "
               "newspaper pan peppershaker plate plunger pot saltshaker soapbar soapbottle spraybottle "
               "tissuebox toiletpaper toiletpaperroll vase wateringcan winebottle",
    "cart": "candle cloth dishsponge handtowel mug papertowel plunger soapbar soapbottle spraybottle statue "
            "tissuebox toiletpaper toiletpaperroll vase",
    "coffeemachine": "mug",
    "coffeetable": "alarmclock apple baseballbat basketball book bowl box bread butterknife candle cd "
                   "cellphone cloth creditcard cup dishsponge egg fork glassbottle handtowel kettle "
                   "keychain knife ladle laptop lettuce mug newspaper pan papertowel pen pencil "
                   "peppershaker plate pot potato remotecontrol saltshaker soapbar soapbottle spatula spoon "
                   "spraybottle statue tennisracket tissuebox toiletpaper toiletpaperroll tomato vase watch "
                   "wateringcan winebottle",
    "countertop": "alarmclock apple baseballbat basketball book bowl box bread butterknife candle cd "
                  "cellphone cloth creditcard cup dishsponge egg fork glassbottle handtowel kettle keychain "
                  "knife ladle laptop lettuce mug newspaper pan papertowel pen pencil peppershaker plate "
                  "pot potato remotecontrol saltshaker soapbar soapbottle spatula spoon spraybottle statue "
                  "tennisracket tissuebox toiletpaper toiletpaperroll tomato vase watch wateringcan "
                  "winebottle",
    "desk": "alarmclock basketball book bowl box candle cd cellphone cloth creditcard cup glassbottle "
            "keychain laptop mug newspaper pen pencil plate remotecontrol soapbottle spraybottle statue "
            "tennisracket tissuebox toiletpaper toiletpaperroll vase watch wateringcan winebottle",
    "diningtable": "alarmclock apple baseballbat basketball book bowl box bread butterknife candle cd "
                   "cellphone cloth creditcard cup dishsponge egg fork glassbottle handtowel kettle "
                   "keychain knife ladle laptop lettuce mug newspaper pan papertowel pen pencil "
                   "peppershaker plate pot potato remotecontrol saltshaker soapbar soapbottle spatula spoon "
                   "spraybottle statue tennisracket tissuebox toiletpaper toiletpaperroll tomato vase watch "
                   "wateringcan winebottle",
    "drawer": "book butterknife candle cd cellphone cloth creditcard dishsponge fork handtowel keychain "
              "knife ladle newspaper pen pencil peppershaker remotecontrol saltshaker soapbar soapbottle "
              "spatula spoon spraybottle tissuebox toiletpaper toiletpaperroll watch wateringcan",
    "dresser": "alarmclock basketball book bowl box candle cd cellphone cloth creditcard cup glassbottle "
               "keychain laptop mug newspaper pen pencil plate remotecontrol spraybottle statue "
               "tennisracket tissuebox toiletpaper toiletpaperroll vase watch wateringcan winebottle",
    "fridge": "apple bowl bread cup egg glassbottle lettuce mug pan plate pot potato tomato winebottle",
    "garbagecan": "apple bread cd cloth dishsponge egg handtowel lettuce newspaper papertowel pen pencil "
                  "potato soapbar soapbottle spraybottle tissuebox toiletpaper toiletpaperroll tomato "
                  "winebottle",
    "handtowelholder": "handtowel",
    "laundryhamper": "cloth",
    "microwave": "apple bowl bread cup egg glassbottle mug plate potato tomato",
    "ottoman": "basketball book box cellphone cloth creditcard keychain laptop newspaper pillow "
               "remotecontrol",
    "safe": "cd cellphone creditcard keychain statue vase watch",
    "shelf": "alarmclock book bowl box candle cd cellphone cloth creditcard cup dishsponge glassbottle "
             "handtowel kettle keychain mug newspaper papertowel pen pencil peppershaker plate pot "
             "remotecontrol saltshaker soapbar soapbottle spraybottle statue tissuebox toiletpaper "
             "toiletpaperroll vase watch wateringcan winebottle",
    "sidetable": "alarmclock apple baseballbat basketball book bowl box bread butterknife candle cd "
                 "cellphone cloth creditcard cup dishsponge egg fork glassbottle handtowel kettle keychain "
                 "knife ladle laptop lettuce mug newspaper pan papertowel pen pencil peppershaker plate pot "
                 "potato remotecontrol saltshaker soapbar soapbottle spatula spoon spraybottle statue "
                 "tennisracket tissuebox toiletpaper toiletpaperroll tomato vase watch wateringcan "
                 "winebottle",
    "sinkbasin": "apple bowl butterknife cloth cup dishsponge egg fork glassbottle handtowel kettle knife "
                 "ladle lettuce mug pan plate pot potato soapbar spatula spoon tomato",
    "sofa": "basketball book box cellphone cloth creditcard keychain laptop newspaper pillow remotecontrol",
    "stoveburner": "kettle pan pot",
    "toaster": "",
    "toilet": "candle cloth dishsponge handtowel newspaper papertowel soapbar soapbottle spraybottle "
              "tissuebox toiletpaper toiletpaperroll",
    "toiletpaperhanger": "toiletpaper toiletpaperroll",
    "towelholder": "towel",
    "tvstand": "tissuebox",
}
# VAL_ACTION_OBJECTS: alfred.pddl's HeatObject, CoolObject, CleanObject, ToggleObject and SliceObject
# need the object to be heatable, coolable, cleanable, toggleable or sliceable, and a game marks
# exactly these types so.
HEATABLE = frozenset({"apple", "bread", "cup", "egg", "mug", "plate", "potato", "tomato"})
COOLABLE = frozenset({"apple", "bowl", "bread", "cup", "egg", "lettuce", "mug", "pan", "plate", "pot",
                      "potato", "tomato", "winebottle"})
CLEANABLE = frozenset({"apple", "bowl", "butterknife", "cloth", "cup", "dishsponge", "egg", "fork",
                       "kettle", "knife", "ladle", "lettuce", "mug", "pan", "plate", "pot", "potato",
                       "soapbar", "spatula", "spoon", "tomato"})
TOGGLEABLE = frozenset({"desklamp", "floorlamp"})
SLICEABLE = frozenset({"apple", "bread", "egg", "lettuce", "potato", "tomato"})
# OPENABLE_CLASS_LIST without box, which the text game only has as an object (see the docstring).
OPENABLE = frozenset({"cabinet", "drawer", "fridge", "microwave", "safe"})
# MOVABLE_RECEPTACLES: the objects a game marks isReceptacleObject (``examine`` describes them so).
RECEPTACLE_OBJECTS = frozenset({"bowl", "box", "cup", "mug", "pan", "plate", "pot"})
# GOALS_VALID: the room kinds each task type is set in.
TASK_ROOMS: dict[str, frozenset[str]] = {
    "pick_and_place_simple": frozenset({"bathroom", "bedroom", "kitchen", "livingroom"}),
    "look_at_obj_in_light": frozenset({"bedroom", "livingroom"}),
    "pick_clean_then_place_in_recep": frozenset({"bathroom", "kitchen"}),
    "pick_heat_then_place_in_recep": frozenset({"kitchen"}),
    "pick_cool_then_place_in_recep": frozenset({"kitchen"}),
    "pick_two_obj_and_place": frozenset({"bathroom", "bedroom", "kitchen", "livingroom"}),
}

# -- counted from the shipped games (json_2.1.1) ---------------------------------------------------
# Room kind -> receptacle type -> (mean instances per room, most in one room), over the 28 scenes of
# each kind, for the types found in at least 5% of them. The mean weighs which receptacles a
# generated room gets beyond the ones its task needs, so that kitchens fill up with cabinets as
# ALFWorld's do.
ROOMS: dict[str, dict[str, tuple[float, int]]] = {
    "kitchen": {"cabinet": (13.68, 27), "coffeemachine": (1.0, 1), "countertop": (2.36, 4),
                "diningtable": (0.71, 3), "drawer": (5.79, 27), "fridge": (1.0, 1), "garbagecan": (1.0, 1),
                "microwave": (1.0, 1), "shelf": (0.54, 3), "sidetable": (0.11, 1), "sinkbasin": (1.0, 1),
                "stoveburner": (4.07, 6), "toaster": (1.0, 1)},
    "livingroom": {"armchair": (1.29, 3), "cabinet": (0.61, 8), "coffeetable": (1.0, 2),
                   "diningtable": (0.61, 2), "drawer": (3.96, 21), "dresser": (0.39, 2),
                   "garbagecan": (1.0, 1), "ottoman": (0.14, 1), "safe": (0.07, 1), "shelf": (2.71, 14),
                   "sidetable": (1.5, 5), "sofa": (1.21, 2), "tvstand": (0.5, 2)},
    "bedroom": {"armchair": (0.32, 3), "bed": (1.14, 2), "cabinet": (0.39, 4), "desk": (0.79, 2),
                "diningtable": (0.14, 1), "drawer": (5.89, 17), "dresser": (0.54, 2), "garbagecan": (1.0, 1),
                "laundryhamper": (0.29, 1), "safe": (0.18, 1), "shelf": (3.18, 14), "sidetable": (0.86, 2)},
    "bathroom": {"bathtubbasin": (0.68, 1), "cabinet": (2.14, 9), "cart": (0.07, 1), "countertop": (1.0, 2),
                 "drawer": (2.43, 8), "dresser": (0.07, 1), "garbagecan": (1.0, 1),
                 "handtowelholder": (1.5, 4), "shelf": (0.5, 4), "sidetable": (0.07, 1),
                 "sinkbasin": (1.5, 2), "toilet": (1.0, 1), "toiletpaperhanger": (1.0, 1),
                 "towelholder": (1.29, 2)},
}
# Room kind -> the object types found inside a receptacle in at least 5% of the kind's games. Left
# out: papertowelroll and teddybear, which no receptacle can contain (so once taken they could never
# be put down), and baseball bats, basketballs, tennis rackets and floor lamps, which stand on the
# floor, outside every receptacle, where no command of the text game reaches them.
ROOM_OBJECTS: dict[str, str] = {
    "kitchen": "apple book bowl bread butterknife cellphone creditcard cup dishsponge egg fork glassbottle "
               "houseplant kettle knife ladle lettuce mug pan pen pencil peppershaker plate pot potato "
               "saltshaker sink soapbottle spatula spoon spraybottle statue tomato vase winebottle",
    "livingroom": "book bowl box candle cellphone creditcard desklamp houseplant keychain laptop newspaper "
                  "pen pencil pillow plate remotecontrol statue television tissuebox vase watch wateringcan",
    "bedroom": "alarmclock book bowl box cd cellphone creditcard desklamp houseplant keychain laptop mirror "
               "mug pen pencil pillow remotecontrol statue tissuebox vase watch window",
    "bathroom": "candle cloth dishsponge handtowel mirror sink soapbar soapbottle spraybottle tissuebox "
                "toiletpaper towel",
}
# Fixtures: objects the games never mark pickupable but put inside a receptacle, and every receptacle
# type one was found in (canContain has no row for them: they are never put anywhere).
FIXTURE_HOMES: dict[str, str] = {
    "desklamp": "coffeetable desk dresser shelf sidetable",
    "houseplant": "coffeetable countertop desk diningtable dresser shelf sidetable tvstand",
    "television": "coffeetable dresser sidetable tvstand",
    "mirror": "countertop dresser",
    "window": "countertop dresser shelf",
    "sink": "countertop sinkbasin",
}
# Receptacles that share one location (one receptacleAtLocation place): for every pair of receptacle
# types, the share of same-room pairs of instances that stand together, one game per scene. Pairs
# never found together are absent. E.g. 42 of 177 stove-burner pairs share a place.
SHARED_LOCATION: dict[tuple[str, str], float] = {
    ("cabinet", "cabinet"): 0.012, ("cabinet", "drawer"): 0.002, ("cabinet", "garbagecan"): 0.004,
    ("cabinet", "shelf"): 0.003, ("cabinet", "stoveburner"): 0.001, ("coffeemachine", "countertop"): 0.106,
    ("countertop", "drawer"): 0.002, ("countertop", "stoveburner"): 0.004, ("countertop", "toaster"): 0.121,
    ("desk", "drawer"): 0.024, ("diningtable", "diningtable"): 0.111, ("drawer", "drawer"): 0.032,
    ("drawer", "dresser"): 0.038, ("drawer", "safe"): 0.059, ("drawer", "sidetable"): 0.01,
    ("drawer", "sinkbasin"): 0.004, ("drawer", "stoveburner"): 0.006, ("garbagecan", "stoveburner"): 0.009,
    ("garbagecan", "toiletpaperhanger"): 0.036, ("garbagecan", "tvstand"): 0.071,
    ("handtowelholder", "towelholder"): 0.019, ("shelf", "shelf"): 0.018, ("shelf", "tvstand"): 0.061,
    ("stoveburner", "stoveburner"): 0.237, ("stoveburner", "toaster"): 0.009,
}
# Task type -> the goal object types and goal receptacle types (the lamp, for the light task) of the
# shipped games, read from their folder names (``<task>-<object>-<movable>-<receptacle>-<scene>``).
# Every light game with a floor lamp is marked unsolvable (the lamp has no inReceptacle fact, which
# ToggleObject needs), so the loader never plays one: desk lamps are the only goal lamps.
TASK_OBJECTS: dict[str, str] = {
    "pick_and_place_simple": "alarmclock book bowl box bread butterknife candle cd cellphone cloth "
                             "creditcard dishsponge egg fork glassbottle handtowel kettle keychain knife "
                             "laptop lettuce mug newspaper pan pen pencil peppershaker pillow plate potato "
                             "remotecontrol saltshaker soapbar soapbottle spraybottle statue tissuebox "
                             "toiletpaper tomato vase watch winebottle",
    "look_at_obj_in_light": "alarmclock book bowl box cd cellphone creditcard keychain laptop mug newspaper "
                            "pen pencil pillow plate statue tissuebox vase watch",
    "pick_clean_then_place_in_recep": "apple bowl butterknife cloth cup dishsponge egg fork kettle knife "
                                      "ladle lettuce mug pan plate pot potato soapbar spatula spoon tomato",
    "pick_heat_then_place_in_recep": "apple bread cup egg mug plate potato tomato",
    "pick_cool_then_place_in_recep": "apple bowl bread cup egg lettuce mug pan plate pot potato tomato "
                                     "winebottle",
    "pick_two_obj_and_place": "alarmclock apple book bowl box bread candle cd cellphone cloth creditcard "
                              "cup dishsponge egg glassbottle handtowel kettle keychain knife ladle laptop "
                              "lettuce mug newspaper pan pen pencil peppershaker pillow plate pot potato "
                              "remotecontrol saltshaker soapbar soapbottle spatula spoon spraybottle statue "
                              "tissuebox toiletpaper tomato vase watch wateringcan winebottle",
}
TASK_RECEPTACLES: dict[str, str] = {
    "pick_and_place_simple": "armchair bed cabinet cart coffeetable countertop desk diningtable drawer "
                             "dresser fridge garbagecan microwave ottoman safe shelf sidetable sofa "
                             "stoveburner toilet toiletpaperhanger",
    "look_at_obj_in_light": "desklamp",
    "pick_clean_then_place_in_recep": "cabinet cart coffeemachine countertop diningtable drawer dresser "
                                      "fridge garbagecan microwave shelf sidetable stoveburner toilet",
    "pick_heat_then_place_in_recep": "cabinet coffeemachine countertop diningtable fridge garbagecan shelf "
                                     "sidetable",
    "pick_cool_then_place_in_recep": "cabinet coffeemachine countertop diningtable garbagecan microwave "
                                     "shelf sidetable stoveburner",
    "pick_two_obj_and_place": "armchair bed cabinet cart coffeetable countertop desk diningtable drawer "
                              "dresser fridge garbagecan microwave ottoman safe shelf sidetable sofa toilet",
}
